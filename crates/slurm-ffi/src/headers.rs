//! What the gputokens build scripts share about the installed Slurm headers: where they are
//! (`SLURM_INCLUDE_DIR`, default /usr/include, holding `slurm/*.h`), which release they are
//! (`SLURM_VERSION_NUMBER`), and (feature `bindgen`) a bindgen builder set up for them. Every
//! function tells cargo what to watch, so a Slurm upgrade rebuilds what depends on it.

use std::path::PathBuf;

/// The installed headers.
pub struct Headers {
    include: PathBuf,
}

impl Headers {
    /// The include directory (`$SLURM_INCLUDE_DIR` or /usr/include), whether or not it has Slurm.
    pub fn locate() -> Headers {
        println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
        let include =
            std::env::var_os("SLURM_INCLUDE_DIR").map_or_else(|| PathBuf::from("/usr/include"), PathBuf::from);
        Headers { include }
    }

    /// The headers, which must hold each of `files` (e.g. `slurm.h`); panics saying what to install.
    pub fn require(files: &[&str]) -> Headers {
        let headers = Headers::locate();
        for file in files.iter().chain(["slurm_version.h"].iter()) {
            let path = headers.file(file);
            println!("cargo:rerun-if-changed={}", path.display());
            if !path.exists() {
                panic!(
                    "{} not found: install the Slurm development headers (Debian: libslurm-dev) or set \
                     SLURM_INCLUDE_DIR to the directory that holds slurm/{file}",
                    path.display()
                );
            }
        }
        headers
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.include.join("slurm").join(name)
    }

    /// `SLURM_VERSION_NUMBER` (e.g. 0x160508 for 22.05.8); None when slurm_version.h is missing or
    /// has none.
    pub fn version_number(&self) -> Option<u32> {
        let header = self.file("slurm_version.h");
        println!("cargo:rerun-if-changed={}", header.display());
        version_number(&std::fs::read_to_string(header).ok()?)
    }

    /// A bindgen builder over `#include <slurm/NAME>` for each of `headers`, with the settings both
    /// plugins use; the caller adds its allowlists.
    #[cfg(feature = "bindgen")]
    pub fn bindgen(&self, headers: &[&str]) -> bindgen::Builder {
        let contents: String = headers.iter().map(|h| format!("#include <slurm/{h}>\n")).collect();
        bindgen::Builder::default()
            .header_contents("gputokens_slurm.h", &contents)
            .clang_arg(format!("-I{}", self.include.display()))
            .prepend_enum_name(false)
            .generate_comments(false)
    }
}

/// Writes generated bindings to `$OUT_DIR/<file>` (for `include!(concat!(env!("OUT_DIR"), ...))`)
/// and returns them as text, for checks of what this release's structs hold ([`struct_has_field`]).
#[cfg(feature = "bindgen")]
pub fn write(builder: bindgen::Builder, file: &str) -> String {
    let bindings = builder.generate().unwrap_or_else(|e| panic!("bindgen failed on the Slurm headers: {e}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join(file);
    bindings.write_to_file(&out).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    bindings.to_string()
}

/// Whether generated bindings declare `pub struct NAME { ... pub FIELD: ... }`: how a build script
/// tells one release's layout from another's by what the headers say, not by a guessed version.
pub fn struct_has_field(bindings: &str, name: &str, field: &str) -> bool {
    let Some(start) = bindings.find(&format!("pub struct {name} {{")) else { return false };
    let body = &bindings[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.contains(&format!("pub {field}: "))
}

/// `#define SLURM_VERSION_NUMBER 0x160508` → 0x160508.
pub fn version_number(header_text: &str) -> Option<u32> {
    let hex = header_text.lines().find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER"))?;
    u32::from_str_radix(hex.trim().trim_start_matches("0x"), 16).ok()
}

/// 0x160508 → `22.05.8`.
pub fn release(number: u32) -> String {
    format!("{}.{:02}.{}", number >> 16, (number >> 8) & 0xff, number & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_release() {
        let text = "#ifndef _SLURM_VERSION_H\n#define SLURM_VERSION_NUMBER 0x160508\n#define SLURM_VERSION_MAJOR 22\n";
        assert_eq!(version_number(text), Some(0x160508));
        assert_eq!(release(0x160508), "22.05.8");
        assert_eq!(release(0x170b0a), "23.11.10");
        assert_eq!(version_number("nothing here"), None);
    }

    #[test]
    fn finds_a_field_in_one_struct_only() {
        let bindings = "pub struct slurm_step_id_t {\n    pub job_id: u32,\n}\npub struct job_descriptor {\n    \
                        pub account: *mut c_char,\n    pub step_id: slurm_step_id_t,\n}\n";
        assert!(struct_has_field(bindings, "job_descriptor", "step_id"));
        assert!(!struct_has_field(bindings, "job_descriptor", "job_id"), "job_id belongs to slurm_step_id_t");
        assert!(!struct_has_field(bindings, "job_desc", "account"), "no struct of that name");
    }
}
