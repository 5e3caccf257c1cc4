//! The shape of a job — nodes, tasks, sockets and array tasks — that a `tres_per_*` count is
//! multiplied by. A module of its own because both the squeue reader and the estimate use it, and
//! the estimate reads squeue's jobs: the shared type sits below both.

/// How many of each unit a `tres_per_*` count is multiplied by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobShape {
    pub nodes: u64,
    pub tasks: u64,
    pub sockets_per_node: u64,
    /// Array tasks (1 for a plain job).
    pub array_tasks: u64,
}

impl Default for JobShape {
    fn default() -> Self {
        JobShape { nodes: 1, tasks: 1, sockets_per_node: 1, array_tasks: 1 }
    }
}

/// Tasks of an array index expression: `0-99%4` → 100, `1,3,5-7` → 5, `0-15:4` → 4; None when unreadable.
pub fn array_task_count(expr: &str) -> Option<u64> {
    let expr = expr.split('%').next().unwrap_or_default();
    let mut total = 0u64;
    for part in expr.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u64>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let n = match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
                if b < a {
                    return None;
                }
                (b - a) / step + 1
            }
            None => {
                range.parse::<u64>().ok()?;
                1
            }
        };
        total = total.checked_add(n)?;
    }
    (total > 0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn array_expressions() {
        assert_eq!(array_task_count("0-99%4"), Some(100));
        assert_eq!(array_task_count("1,3,5-7"), Some(5));
        assert_eq!(array_task_count("0-15:4"), Some(4));
        assert_eq!(array_task_count("7"), Some(1));
        assert_eq!(array_task_count("5-1"), None);
        assert_eq!(array_task_count("a-b"), None);
        assert_eq!(array_task_count(""), None);
    }

    proptest! {
        #[test]
        fn any_array_expression_never_panics(expr in "[0-9,:%-]{0,24}|\\PC*") {
            if let Some(n) = array_task_count(&expr) {
                prop_assert!(n > 0);
            }
        }
    }
}
