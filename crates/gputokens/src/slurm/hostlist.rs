//! Slurm's host lists (`vm`, `n[1-3]`, `gpu[01-04,7],cpu1`), as squeue names a job's nodes and
//! scontrol a partition's: expanded to node names, to tell whether a job's nodes are in a partition.

/// More names than a list may expand to: a typo such as `n[1-99999999]` is refused, not allocated.
const MOST: usize = 1 << 20;

/// The node names of `list`, in its order; None where it is not a host list or expands past [`MOST`].
/// Each comma-separated part outside brackets is a prefix, optionally one bracketed set of numbers
/// and ranges (zero-padded as written), and a suffix.
pub fn expand(list: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for part in top_level_parts(list.trim())? {
        let Some((prefix, rest)) = part.split_once('[') else {
            names.push(part.to_string());
            continue;
        };
        let (ranges, suffix) = rest.split_once(']')?;
        if suffix.contains(['[', ']']) {
            return None;
        }
        for range in ranges.split(',') {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let width = first.len();
            let (first, last): (u64, u64) = (first.parse().ok()?, last.parse().ok()?);
            if last < first || names.len() as u64 + (last - first) >= MOST as u64 {
                return None;
            }
            names.extend((first..=last).map(|n| format!("{prefix}{n:0width$}{suffix}")));
        }
    }
    Some(names)
}

/// `list` split at the commas outside brackets; None where its brackets do not pair up.
fn top_level_parts(list: &str) -> Option<Vec<&str>> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0).then_some(())?;
    parts.push(&list[start..]);
    Some(parts.into_iter().filter(|p| !p.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_as_slurm_writes_them() {
        assert_eq!(expand("vm").unwrap(), ["vm"]);
        assert_eq!(expand("n[1-3]").unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(expand("gpu[01-02,7],cpu1").unwrap(), ["gpu01", "gpu02", "gpu7", "cpu1"], "each range its width");
        assert_eq!(expand("rack[1-2]-a").unwrap(), ["rack1-a", "rack2-a"]);
        assert_eq!(expand("").unwrap(), Vec::<String>::new());
        for bad in ["n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[1-2]x[1-2]", "n[1-99999999]"] {
            assert_eq!(expand(bad), None, "{bad}");
        }
    }
}
