//! GPU requests of a job being submitted, as slurmctld hands them to a job_submit plugin: the
//! `tres_per_job` (`--gpus`), `tres_per_node` (`--gres`, `--gpus-per-node`), `tres_per_task`
//! (`--gpus-per-task`) and `tres_per_socket` (`--gpus-per-socket`) strings.
//!
//! Slurm 22.05 and 23.02 write entries as `gres:gpu:a6000:2`, 23.11 and later as `gres/gpu:a6000:2`;
//! both are read, typed or untyped (`gres:gpu:2`), with or without a count (`gres:gpu` = 1), several
//! entries separated by `,` (or `;`, as slurm.h's comments say). Counts may carry Slurm's `k`/`m`/`g`
//! suffixes (×1024). GPU shares (`gres:shard:2`, `gres:mps:50`) count too: they are charged as their
//! fraction of a GPU (see `tres`). Other generic resources (`gres/gpumem:…`) and other TRES
//! (`license/…`) are skipped.

use std::fmt;

/// What a GPU count applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Per {
    /// `tres_per_job`: `--gpus`
    Job,
    /// `tres_per_node`: `--gres=gpu…`, `--gpus-per-node`
    Node,
    /// `tres_per_task`: `--gpus-per-task`
    Task,
    /// `tres_per_socket`: `--gpus-per-socket`
    Socket,
}

impl Per {
    pub fn field(self) -> &'static str {
        match self {
            Per::Job => "tres_per_job",
            Per::Node => "tres_per_node",
            Per::Task => "tres_per_task",
            Per::Socket => "tres_per_socket",
        }
    }
}

/// Which generic resource an entry asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Whole GPUs (`gpu`)
    Gpu,
    /// GPU shards (`shard`)
    Shard,
    /// CUDA MPS units (`mps`)
    Mps,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gpu => "gpu",
            Kind::Shard => "shard",
            Kind::Mps => "mps",
        }
    }
}

/// One GPU entry of a request: `count` GPUs (or shares) of `gpu_type` (None = any type) per `per`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuCount {
    pub per: Per,
    pub kind: Kind,
    /// Lower-cased, as prices are matched.
    pub gpu_type: Option<String>,
    pub count: u64,
}

/// The four TRES request strings of a job description, as given (None = not set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TresPer<'a> {
    pub job: Option<&'a str>,
    pub node: Option<&'a str>,
    pub task: Option<&'a str>,
    pub socket: Option<&'a str>,
}

/// All GPU entries of a job's request (entries with a count of 0 are dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuRequest {
    pub counts: Vec<GpuCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: cannot read the GPU request '{entry}': {reason}")]
pub struct RequestError {
    pub field: &'static str,
    pub entry: String,
    pub reason: &'static str,
}

impl GpuRequest {
    /// Reads every field. A malformed GPU entry is an error (the caller decides whether to treat the
    /// job as a GPU job); malformed entries of other resources are not GPUs and are ignored.
    pub fn parse(fields: &TresPer<'_>) -> Result<GpuRequest, RequestError> {
        let mut counts = Vec::new();
        for (per, text) in
            [(Per::Job, fields.job), (Per::Node, fields.node), (Per::Task, fields.task), (Per::Socket, fields.socket)]
        {
            if let Some(text) = text {
                counts.extend(parse_tres_per(text, per)?);
            }
        }
        Ok(GpuRequest { counts })
    }

    /// Whether the job asks for at least one GPU or a share of one.
    pub fn has_gpus(&self) -> bool {
        !self.counts.is_empty()
    }
}

impl fmt::Display for GpuRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.counts.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let per = c.per.field().trim_start_matches("tres_");
            let kind = c.kind.name();
            match &c.gpu_type {
                Some(t) => write!(f, "{sep}{kind}:{t}:{} {per}", c.count)?,
                None => write!(f, "{sep}{kind}:{} {per}", c.count)?,
            }
        }
        Ok(())
    }
}

/// Parses one `tres_per_*` string; returns its GPU entries with a count above 0.
pub fn parse_tres_per(text: &str, per: Per) -> Result<Vec<GpuCount>, RequestError> {
    let mut out = Vec::new();
    for entry in text.split([',', ';']).map(str::trim).filter(|e| !e.is_empty()) {
        if let Some(count) = parse_entry(entry, per)? {
            if count.count > 0 {
                out.push(count);
            }
        }
    }
    Ok(out)
}

/// One entry: `gres:gpu[:type][:count]`, `gres/gpu[:type][:count]`, or with `=count` (likewise
/// `shard` and `mps`). None when the entry is not a GPU or a share of one.
fn parse_entry(entry: &str, per: Per) -> Result<Option<GpuCount>, RequestError> {
    let err = |reason| RequestError { field: per.field(), entry: entry.to_string(), reason };
    let Some(spec) = entry.strip_prefix("gres:").or_else(|| entry.strip_prefix("gres/")) else {
        return Ok(None); // license/…, cpu=…: not a generic resource
    };
    // `gpu:a6000=2` (count after `=`) is read like `gpu:a6000:2`.
    let (spec, eq_count) = match spec.split_once('=') {
        Some((s, c)) => (s, Some(c)),
        None => (spec, None),
    };
    let mut parts = spec.split(':');
    let kind = match parts.next().unwrap_or_default() {
        "gpu" => Kind::Gpu,
        "shard" => Kind::Shard,
        "mps" => Kind::Mps,
        _ => return Ok(None), // gpumem, nic, …
    };
    let rest: Vec<&str> = parts.collect();
    let (gpu_type, count) = match (rest.as_slice(), eq_count) {
        ([], None) => (None, 1),
        ([], Some(c)) => (None, parse_count(c).ok_or_else(|| err("the count is not a whole number"))?),
        ([one], None) => match parse_count(one) {
            Some(n) => (None, n),
            None => (Some(*one), 1),
        },
        ([t], Some(c)) => (Some(*t), parse_count(c).ok_or_else(|| err("the count is not a whole number"))?),
        ([t, c], None) => (Some(*t), parse_count(c).ok_or_else(|| err("the count is not a whole number"))?),
        _ => return Err(err("expected gpu[:type][:count]")),
    };
    let gpu_type = match gpu_type {
        Some("") => return Err(err("empty GPU type")),
        Some(t) => Some(t.to_ascii_lowercase()),
        None => None,
    };
    Ok(Some(GpuCount { per, kind, gpu_type, count }))
}

/// A whole number with an optional k/m/g/t suffix (powers of 1024, as Slurm reads gres counts). One
/// beyond u64 is u64::MAX: still a count, so the request is refused as more than can be counted
/// rather than read as no request at all.
fn parse_count(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, factor) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&text[..i], 1 << 20),
        (i, 'g' | 'G') => (&text[..i], 1 << 30),
        (i, 't' | 'T') => (&text[..i], 1 << 40),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u64>().unwrap_or(u64::MAX).saturating_mul(factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(per: Per, t: Option<&str>, count: u64) -> GpuCount {
        GpuCount { per, kind: Kind::Gpu, gpu_type: t.map(str::to_string), count }
    }

    fn share(kind: Kind, per: Per, t: Option<&str>, count: u64) -> GpuCount {
        GpuCount { kind, ..gpu(per, t, count) }
    }

    #[test]
    fn typed_in_the_22_05_and_23_02_form() {
        assert_eq!(parse_tres_per("gres:gpu:a6000:2", Per::Node).unwrap(), [gpu(Per::Node, Some("a6000"), 2)]);
    }

    #[test]
    fn typed_in_the_23_11_form() {
        assert_eq!(parse_tres_per("gres/gpu:a6000:2", Per::Job).unwrap(), [gpu(Per::Job, Some("a6000"), 2)]);
    }

    #[test]
    fn untyped_in_both_forms() {
        assert_eq!(parse_tres_per("gres:gpu:2", Per::Job).unwrap(), [gpu(Per::Job, None, 2)]);
        assert_eq!(parse_tres_per("gres/gpu:2", Per::Job).unwrap(), [gpu(Per::Job, None, 2)]);
    }

    #[test]
    fn without_a_count_means_one() {
        assert_eq!(parse_tres_per("gres:gpu", Per::Node).unwrap(), [gpu(Per::Node, None, 1)]);
        assert_eq!(parse_tres_per("gres/gpu", Per::Node).unwrap(), [gpu(Per::Node, None, 1)]);
        assert_eq!(parse_tres_per("gres:gpu:rtx3090", Per::Node).unwrap(), [gpu(Per::Node, Some("rtx3090"), 1)]);
        assert_eq!(parse_tres_per("gres/gpu:rtx3090", Per::Node).unwrap(), [gpu(Per::Node, Some("rtx3090"), 1)]);
    }

    #[test]
    fn count_after_an_equals_sign() {
        assert_eq!(parse_tres_per("gres/gpu=3", Per::Job).unwrap(), [gpu(Per::Job, None, 3)]);
        assert_eq!(parse_tres_per("gres/gpu:a6000=1", Per::Job).unwrap(), [gpu(Per::Job, Some("a6000"), 1)]);
    }

    #[test]
    fn types_are_lower_cased() {
        assert_eq!(parse_tres_per("gres:gpu:A6000:1", Per::Node).unwrap(), [gpu(Per::Node, Some("a6000"), 1)]);
    }

    #[test]
    fn several_entries_and_other_resources() {
        let got = parse_tres_per("gres:gpu:rtx2080:2,license/matlab:1,gres:nic:1,gres:gpu:a6000:1", Per::Node);
        assert_eq!(got.unwrap(), [gpu(Per::Node, Some("rtx2080"), 2), gpu(Per::Node, Some("a6000"), 1)]);
        let got = parse_tres_per("gres/gpu:rtx2080:1;gres/gpumem:10G", Per::Node).unwrap();
        assert_eq!(got, [gpu(Per::Node, Some("rtx2080"), 1)]);
    }

    #[test]
    fn gpu_shares_in_both_forms() {
        let got = parse_tres_per("gres:shard:2,gres/mps:a6000:50", Per::Node).unwrap();
        assert_eq!(got, [share(Kind::Shard, Per::Node, None, 2), share(Kind::Mps, Per::Node, Some("a6000"), 50)]);
        let req = GpuRequest::parse(&TresPer { node: Some("gres/shard:rtx3090:1"), ..TresPer::default() }).unwrap();
        assert!(req.has_gpus());
        assert_eq!(req.to_string(), "shard:rtx3090:1 per_node");
    }

    #[test]
    fn zero_gpus_is_no_request() {
        assert!(parse_tres_per("gres:gpu:0", Per::Node).unwrap().is_empty());
        assert!(parse_tres_per("gres/gpu:a6000:0", Per::Job).unwrap().is_empty());
    }

    #[test]
    fn suffixed_counts() {
        assert_eq!(parse_tres_per("gres:gpu:1k", Per::Job).unwrap(), [gpu(Per::Job, None, 1024)]);
        assert_eq!(parse_count("2M"), Some(2 << 20));
        assert_eq!(parse_count("k"), None);
        assert_eq!(parse_count("99999999999999999999"), Some(u64::MAX), "too many is still many");
        assert_eq!(parse_count("18446744073709551615t"), Some(u64::MAX));
    }

    #[test]
    fn cpu_only_and_empty() {
        assert!(parse_tres_per("", Per::Node).unwrap().is_empty());
        assert!(parse_tres_per("gres:shard:0", Per::Node).unwrap().is_empty());
        assert!(parse_tres_per("gres:gpumem:10G", Per::Node).unwrap().is_empty());
        assert!(parse_tres_per("license/foo:1", Per::Job).unwrap().is_empty());
        let none = GpuRequest::parse(&TresPer::default()).unwrap();
        assert!(!none.has_gpus());
    }

    #[test]
    fn malformed_gpu_entries_are_errors() {
        let e = parse_tres_per("gres:gpu:a6000:x", Per::Node).unwrap_err();
        assert_eq!((e.field, e.entry.as_str()), ("tres_per_node", "gres:gpu:a6000:x"));
        assert!(parse_tres_per("gres/gpu:a:b:c", Per::Job).is_err());
        assert!(parse_tres_per("gres:gpu::2", Per::Job).is_err());
        assert!(parse_tres_per("gres/gpu=many", Per::Job).is_err());
        assert!(parse_tres_per("gres:shard:x:y:z", Per::Node).is_err());
        // …but a malformed entry of another resource is none of our business.
        assert!(parse_tres_per("gres:nic:x:y:z", Per::Node).unwrap().is_empty());
    }

    #[test]
    fn every_field_of_a_job() {
        let fields = TresPer {
            job: Some("gres:gpu:1"),
            node: Some("gres/gpu:a6000:2"),
            task: Some("gres:gpu:rtx3090:1"),
            socket: Some("gres/gpu:1"),
        };
        let req = GpuRequest::parse(&fields).unwrap();
        assert!(req.has_gpus());
        assert_eq!(
            req.counts,
            [
                gpu(Per::Job, None, 1),
                gpu(Per::Node, Some("a6000"), 2),
                gpu(Per::Task, Some("rtx3090"), 1),
                gpu(Per::Socket, None, 1),
            ]
        );
        assert_eq!(req.to_string(), "gpu:1 per_job,gpu:a6000:2 per_node,gpu:rtx3090:1 per_task,gpu:1 per_socket");
        let err = GpuRequest::parse(&TresPer { task: Some("gres:gpu:x:y"), ..TresPer::default() }).unwrap_err();
        assert_eq!(err.field, "tres_per_task");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn per() -> impl Strategy<Value = Per> {
            prop_oneof![Just(Per::Job), Just(Per::Node), Just(Per::Task), Just(Per::Socket)]
        }

        fn kind() -> impl Strategy<Value = Kind> {
            prop_oneof![Just(Kind::Gpu), Just(Kind::Shard), Just(Kind::Mps)]
        }

        proptest! {
            #[test]
            fn any_text_parses_or_is_a_named_error(text in "\\PC*", per in per()) {
                match parse_tres_per(&text, per) {
                    Ok(counts) => prop_assert!(counts.iter().all(|c| c.count > 0 && c.per == per)),
                    Err(e) => prop_assert!(e.field == per.field() && text.contains(&e.entry)),
                }
            }

            #[test]
            fn gres_like_text_never_panics(text in "((gres[:/](gpu|shard|mps|nic)(:[a-zA-Z0-9]{0,5}){0,3}(=[0-9kKmMgGtT]{0,22})?)[,;]?){0,5}", per in per()) {
                let _ = parse_tres_per(&text, per);
            }

            /// Every well-formed entry is read back as written, in both Slurm spellings and both count forms.
            #[test]
            fn well_formed_entries_are_read_exactly(
                per in per(),
                kind in kind(),
                gpu_type in proptest::option::of("[a-z][a-z0-9]{0,7}"),
                count in prop_oneof![1..100u64, 1..=u64::MAX],
                slash in any::<bool>(),
                equals in any::<bool>(),
            ) {
                let prefix = if slash { "gres/" } else { "gres:" };
                let typed = gpu_type.as_ref().map_or(String::new(), |t| format!(":{t}"));
                let sep = if equals { "=" } else { ":" };
                let text = format!("{prefix}{}{typed}{sep}{count}", kind.name());
                // An all-digit type would read as a count: Slurm's own ambiguity, not generated above.
                let got = parse_tres_per(&text, per).unwrap();
                prop_assert_eq!(got, vec![GpuCount { per, kind, gpu_type, count }]);
            }

            /// A larger count, written out or with a suffix, never reads as a smaller one.
            #[test]
            fn counts_are_monotone(a in any::<u64>(), b in any::<u64>(), suffix in "[kKmMgGtT]?") {
                let (a, b) = (a.min(b), a.max(b));
                let (low, high) = (parse_count(&format!("{a}{suffix}")), parse_count(&format!("{b}{suffix}")));
                let plain = parse_count(&b.to_string());
                prop_assert!(low <= high);
                prop_assert!(plain <= high);
            }
        }
    }
}
