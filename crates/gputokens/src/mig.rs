//! MIG slices in GPU type names, as Slurm names them: with `AutoDetect=nvml` a slice's GRES type is
//! its GPU's type, `_`, and its MIG profile (Slurm 22.05: `3g.20gb`; 23.02 on: NVML's profile
//! name, which may also name a compute instance, `1c.3g.20gb`, or an extension, `1g.10gb+me`), and
//! slurm.conf's type is a part of that name, e.g. `a100_3g.20gb`. Pricing reads a slice's share of
//! its GPU from the profile; anything not shaped like one is no slice.

/// A slice's share of its GPU: `slices` of the GPU's `of` compute slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub slices: u32,
    pub of: u32,
}

/// A GPU type that names a MIG slice of a `parent` GPU type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigSlice<'a> {
    /// The GPU's type, as written before the profile (`a100`, `nvidia_a100-sxm4-80gb`).
    pub parent: &'a str,
    pub share: Share,
}

/// The slice `gpu_type` names (matched case-insensitively), or None: no `_` before the profile, a
/// profile of another shape, a GPU not known to have MIG (its slices are priced as unknown types,
/// never guessed cheaper), or more slices than its GPU has.
pub fn parse(gpu_type: &str) -> Option<MigSlice<'_>> {
    let (parent, profile) = gpu_type.rsplit_once('_')?;
    if parent.is_empty() {
        return None;
    }
    let held = compute_slices(profile)?;
    let of = slices_of(parent)?;
    (held <= of).then_some(MigSlice { parent, share: Share { slices: held, of } })
}

/// The MIG GPUs by a word of their name, and their compute slices.
const MIG_GPUS: &[(&str, u32)] = &[
    ("a100", 7),
    ("a800", 7),
    ("h100", 7),
    ("h800", 7),
    ("h200", 7),
    ("h20", 7),
    ("gh200", 7),
    ("b100", 7),
    ("b200", 7),
    ("gb200", 7),
    ("b300", 7),
    ("gb300", 7),
    ("a30", 4),
];

/// How many compute slices a whole GPU of type `parent` has, known from a word of its name (the
/// RTX PRO 6000 from `pro6000` once `_`, `-` and spaces are left out: 4); None for a GPU not known
/// to have MIG.
pub fn slices_of(parent: &str) -> Option<u32> {
    let words: Vec<String> = parent.split(|c: char| !c.is_ascii_alphanumeric()).map(str::to_ascii_lowercase).collect();
    if words.concat().contains("pro6000") {
        return Some(4);
    }
    MIG_GPUS.iter().find(|(name, _)| words.iter().any(|w| w == name)).map(|&(_, slices)| slices)
}

/// The compute slices a profile holds: `[Cc.]Ng.MMgb[+ext|-ext]`, a compute instance's C (at most
/// its GPU instance's N), else N.
fn compute_slices(profile: &str) -> Option<u32> {
    let body = match profile.find(['+', '-']) {
        Some(at) => extension(&profile[at + 1..]).then_some(&profile[..at])?,
        None => profile,
    };
    let parts: Vec<&str> = body.split('.').collect();
    let (compute, instance, memory) = match parts.as_slice() {
        [c, g, m] => (Some(number(c, "c")?), *g, *m),
        [g, m] => (None, *g, *m),
        _ => return None,
    };
    let instance = number(instance, "g")?;
    number(memory, "gb")?;
    match compute {
        Some(c) if c > instance => None,
        Some(c) => Some(c),
        None => Some(instance),
    }
}

/// `me`, `me.all`, `gfx`: letters, in dot-separated words.
fn extension(text: &str) -> bool {
    text.split('.').all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphabetic()))
}

/// A count of 1 to 999 without leading zeros, followed by `unit` (case-insensitive).
fn number(text: &str, unit: &str) -> Option<u32> {
    let at = text.len().checked_sub(unit.len())?;
    let digits = text.get(..at).filter(|_| text.get(at..).is_some_and(|u| u.eq_ignore_ascii_case(unit)))?;
    let plain =
        (1..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    plain.then(|| digits.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(gpu_type: &str) -> Option<(&str, u32, u32)> {
        parse(gpu_type).map(|s| (s.parent, s.share.slices, s.share.of))
    }

    #[test]
    fn slurm_names_of_slices() {
        assert_eq!(share("a100_3g.20gb"), Some(("a100", 3, 7)));
        assert_eq!(share("a100_1g.5gb"), Some(("a100", 1, 7)));
        assert_eq!(share("a100_7g.80gb"), Some(("a100", 7, 7)));
        assert_eq!(share("h100_4g.40gb"), Some(("h100", 4, 7)));
        assert_eq!(share("h100_2g.20gb"), Some(("h100", 2, 7)));
        assert_eq!(share("h200_3g.71gb"), Some(("h200", 3, 7)));
        // As AutoDetect=nvml names them: the GPU's whole NVML name, lower-cased.
        assert_eq!(share("nvidia_a100-sxm4-80gb_3g.40gb"), Some(("nvidia_a100-sxm4-80gb", 3, 7)));
        assert_eq!(share("nvidia_a100_3g.20gb"), Some(("nvidia_a100", 3, 7)));
        assert_eq!(share("A100_3G.20GB"), Some(("A100", 3, 7)), "case-insensitive");
    }

    #[test]
    fn extensions_and_compute_instances() {
        assert_eq!(share("a100_1g.10gb+me"), Some(("a100", 1, 7)));
        assert_eq!(share("b200_1g.23gb+me.all"), Some(("b200", 1, 7)));
        assert_eq!(share("b200_1g.23gb-me"), Some(("b200", 1, 7)));
        // A compute instance holds its own compute slices of its GPU instance's.
        assert_eq!(share("a100_1c.3g.20gb"), Some(("a100", 1, 7)));
        assert_eq!(share("a100_2c.3g.20gb"), Some(("a100", 2, 7)));
        assert_eq!(share("a100_4c.3g.20gb"), None, "more compute than its instance");
    }

    #[test]
    fn four_slice_gpus_are_known_by_name() {
        assert_eq!(share("a30_2g.12gb"), Some(("a30", 2, 4)));
        assert_eq!(share("nvidia_a30_4g.24gb"), Some(("nvidia_a30", 4, 4)));
        assert_eq!(share("a30_7g.80gb"), None, "an A30 has 4 slices");
        assert_eq!(share("nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb").map(|s| s.2), Some(4));
        assert_eq!(share("rtxpro6000_2g.48gb").map(|s| s.2), Some(4));
        assert_eq!(slices_of("a300"), None, "a30 only as a word");
        assert_eq!(slices_of("rtx6000"), None);
        assert_eq!(slices_of("rtx_6000_ada"), None);
        assert_eq!(slices_of("nvidia_h100_80gb_hbm3"), Some(7));
        assert_eq!(slices_of("NVIDIA GH200 480GB"), Some(7));
    }

    /// A GPU not known to have MIG (a new one, a typo) is not guessed at 7 slices, which could price
    /// its slices below their share: they are priced as unknown types.
    #[test]
    fn slices_of_an_unknown_gpu_are_no_slice() {
        for unknown in ["a30x_1g.6gb", "newgpu_1g.10gb", "a10_1g.6gb", "rtx_pro_5000_1g.24gb"] {
            assert_eq!(parse(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn other_types_are_no_slice() {
        for odd in [
            "a100",
            "a6000",
            "rtx_a6000",
            "tesla_t4",
            "a100_80gb",
            "3g.20gb",
            "_3g.20gb",
            "a100_",
            "a100_3g",
            "a100_3g.",
            "a100_3g.gb",
            "a100_0g.5gb",
            "a100_03g.20gb",
            "a100_3g.20",
            "a100_3g.20gb+",
            "a100_3g.20gb+m3",
            "a100_3g.20gb+me.",
            "a100_3g.20gb.x",
            "a100_1c.3g.20gb.1",
            "a100_c.3g.20gb",
            "a100_8g.80gb",
            "a100_1000g.5gb",
            "a100_3g.20tb",
            "a100_-3g.20gb",
            "a100_3g.20gb_x",
        ] {
            assert_eq!(parse(odd), None, "{odd}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any text parses or is no slice, and a slice never holds more than its GPU.
            #[test]
            fn any_type_is_a_slice_within_its_gpu_or_none(text in "\\PC*") {
                if let Some(slice) = parse(&text) {
                    prop_assert!(slice.share.slices >= 1 && slice.share.slices <= slice.share.of);
                    prop_assert!(!slice.parent.is_empty());
                }
            }

            #[test]
            fn well_formed_profiles_are_read_exactly(
                gpu in proptest::sample::select(vec![("a100", 7), ("nvidia_h100-80gb", 7), ("b200", 7), ("a30", 4), ("rtx_pro_6000", 4)]),
                g in 1u32..=7, m in 1u32..200, c in proptest::option::of(1u32..=7),
                ext in proptest::option::of("[+-](me|gfx|me\\.all)"),
            ) {
                let (parent, of) = gpu;
                let compute = c.map(|c| format!("{c}c.")).unwrap_or_default();
                let name = format!("{parent}_{compute}{g}g.{m}gb{}", ext.unwrap_or_default());
                let held = c.unwrap_or(g);
                let fits = c.is_none_or(|c| c <= g) && held <= of;
                prop_assert_eq!(share(&name), fits.then_some((parent, held, of)));
            }
        }
    }
}
