//! Generates Rust bindings from the installed `slurm/spank.h` (only what the plugin touches).
//! `SLURM_INCLUDE_DIR` (default /usr/include) points at another tree holding `slurm/spank.h`.

fn main() {
    let headers = slurm_ffi::Headers::require(&["spank.h", "slurm_errno.h"]);
    let builder = headers
        .bindgen(&["spank.h", "slurm_version.h"])
        .allowlist_type("spank_t|spank_context_t|spank_item_t|spank_err_t|spank_option|spank_opt_cb_f")
        .allowlist_var("SPANK_OPTION_MAXLEN|SLURM_VERSION_NUMBER");
    slurm_ffi::write(builder, "spank_bindings.rs");
}
