//! Shadow mode as `sbalance` prints it under its table: to an admin, what each controller's plugin
//! would have done and whose submissions it would have refused; to anyone else, their own count.

use gputokens::protocol::ShadowView;

pub fn text(shadow: &ShadowView) -> String {
    let mut out = match shadow.enforce {
        false => "gputokens is in shadow mode ([admission] enforce = false): no GPU job is refused, deprioritized \
                  or held yet."
            .to_string(),
        true => "gputokens enforces, but these controllers' plugins are in shadow mode (their config says [admission] \
                 enforce = false): they refuse no GPU job."
            .to_string(),
    };
    out.push('\n');
    if !shadow.everyone {
        let count: u64 = shadow.refused.values().sum();
        out += &match count {
            0 => "None of your GPU jobs would have been refused.\n".to_string(),
            1 => "1 of your GPU jobs would have been refused.\n".to_string(),
            n => format!("{n} of your GPU jobs would have been refused.\n"),
        };
        return out;
    }
    if shadow.controllers.is_empty() {
        out += "No controller's plugin has reported what it would have done (its status file in [paths] \
                controller_status).\n";
        return out;
    }
    out += "What each controller's plugin would have done since it started:\n";
    for c in &shadow.controllers {
        let count = |decision: &str| c.would.get(decision).copied().unwrap_or(0);
        out += &format!(
            "  {} (since {}): refused {}, deprioritized {}, time-limited {} GPU jobs\n",
            c.controller,
            gputokens::time::format_local(c.since),
            count("refuse"),
            count("deprioritize"),
            count("limit"),
        );
    }
    let mut refused: Vec<(&String, &u64)> = shadow.refused.iter().filter(|(_, n)| **n > 0).collect();
    // The most refused first: whom enforcement would stop.
    refused.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    out += &match refused.is_empty() {
        true => "No submission would have been refused.\n".to_string(),
        false => {
            let each: Vec<String> = refused.iter().map(|(user, n)| format!("{user} {n}")).collect();
            format!("Submissions that would have been refused, by user: {}\n", each.join(", "))
        }
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::protocol::ControllerShadow;

    fn view(enforce: bool, everyone: bool, refused: &[(&str, u64)]) -> ShadowView {
        let would = [("refuse".to_string(), 4), ("deprioritize".to_string(), 2)].into();
        ShadowView {
            enforce,
            everyone,
            controllers: match everyone {
                true => vec![ControllerShadow { controller: "ctl1".into(), since: 0, would }],
                false => Vec::new(),
            },
            refused: refused.iter().map(|(u, n)| (u.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn an_admin_sees_each_controller_and_whom_it_would_have_refused() {
        let shown = text(&view(false, true, &[("alice", 1), ("bob", 3), ("carol", 0)]));
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("gputokens is in shadow mode ([admission] enforce = false)"), "{shown}");
        assert!(lines[2].starts_with("  ctl1 (since "), "{shown}");
        assert!(lines[2].ends_with("): refused 4, deprioritized 2, time-limited 0 GPU jobs"), "{shown}");
        assert_eq!(lines[3], "Submissions that would have been refused, by user: bob 3, alice 1");
        assert!(text(&view(true, true, &[])).starts_with("gputokens enforces, but these controllers' plugins"));
        assert!(text(&view(false, true, &[])).ends_with("No submission would have been refused.\n"));
    }

    #[test]
    fn a_user_sees_only_their_own_count() {
        assert_eq!(
            text(&view(false, false, &[("alice", 3)])).lines().nth(1),
            Some("3 of your GPU jobs would have been refused.")
        );
        assert!(
            text(&view(false, false, &[("alice", 0)])).ends_with("None of your GPU jobs would have been refused.\n")
        );
        assert!(!text(&view(false, false, &[("alice", 3)])).contains("ctl1"));
    }
}
