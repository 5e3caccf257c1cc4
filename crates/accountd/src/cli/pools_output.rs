//! Pools printed like `sshare -l`: a row per account, its members indented under it (`-P`:
//! '|'-separated), or JSON. `sbalance -A`/`-l` and `accountd admin account show` share it.

use gputokens::protocol::PoolRow;
use gputokens::Tokens;

/// `DrawsOn`: the pool its charges count in too (nested pools), with `(lends)` where it lends to
/// the pools drawing on it.
const HEADER: [&str; 9] =
    ["Account", "User", "Balance", "Floor", "Status", "SpentMonth", "UserLimit", "Coordinators", "DrawsOn"];

/// The rows as lines: `long` adds each pool's members under it.
pub fn lines(rows: &[PoolRow], long: bool, parsable: bool, header: bool) -> Vec<String> {
    let mut table: Vec<[String; 9]> = Vec::new();
    if header {
        table.push(HEADER.map(str::to_string));
    }
    for row in rows {
        let spent: Tokens = row.members.iter().map(|m| m.spent_month).fold(Tokens::ZERO, |a, b| a + b);
        table.push([
            row.account.clone(),
            String::new(),
            row.balance.to_string(),
            row.floor.to_string(),
            row.status.as_str().to_string(),
            spent.to_string(),
            row.user_limit.map_or(String::new(), |l| l.to_string()),
            row.coordinators.join(","),
            draws_on(row),
        ]);
        if long {
            for m in &row.members {
                let indent = if parsable { String::new() } else { " ".to_string() };
                let mut line: [String; 9] = Default::default();
                line[0] = format!("{indent}{}", row.account);
                line[1] = m.user.clone();
                line[5] = m.spent_month.to_string();
                line[6] = row.user_limit.map_or(String::new(), |l| l.to_string());
                table.push(line);
            }
        }
    }
    if parsable {
        return table.iter().map(|r| r.join("|")).collect();
    }
    let widths: Vec<usize> = (0..9).map(|i| table.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    table
        .iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join(" ").trim_end().to_string()
        })
        .collect()
}

/// `dept`, `dept (lends)`, `(lends)`, or nothing.
fn draws_on(row: &PoolRow) -> String {
    match (&row.draws_on, row.lends) {
        (Some(parent), true) => format!("{parent} (lends)"),
        (Some(parent), false) => parent.clone(),
        (None, true) => "(lends)".to_string(),
        (None, false) => String::new(),
    }
}

pub fn json(mode: gputokens::pools::PoolMode, rows: &[PoolRow]) -> String {
    format!("{:#}", serde_json::json!({ "schema": crate::balance_json::SCHEMA, "mode": mode, "pools": rows }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::policy::Status;
    use gputokens::protocol::PoolMember;

    fn lab() -> PoolRow {
        PoolRow {
            account: "lab".into(),
            parent: Some("root".into()),
            balance: Tokens::whole(46),
            floor: Tokens::whole(-10),
            status: Status::Ok,
            daily: Tokens::ZERO,
            monthly: Tokens::whole(30),
            cap: None,
            user_limit: Some(Tokens::whole(50)),
            coordinators: vec!["carol".into()],
            draws_on: None,
            lends: false,
            members: vec![
                PoolMember { user: "alice".into(), spent_month: Tokens::whole(44) },
                PoolMember { user: "bob".into(), spent_month: Tokens::whole(40) },
            ],
        }
    }

    #[test]
    fn the_tree_like_sshare_long() {
        assert_eq!(
            lines(&[lab()], true, false, true),
            [
                "Account User  Balance Floor Status SpentMonth UserLimit Coordinators DrawsOn",
                "lab           46      -10   ok     84         50        carol",
                " lab    alice                      44         50",
                " lab    bob                        40         50",
            ]
        );
        assert_eq!(lines(&[lab()], false, true, false), ["lab||46|-10|ok|84|50|carol|"]);
        assert_eq!(lines(&[lab()], true, true, false)[1], "lab|alice||||44|50||", "nine columns, the last two empty");
        let course = PoolRow { account: "course".into(), draws_on: Some("lab".into()), ..lab() };
        let lending = PoolRow { lends: true, ..lab() };
        assert_eq!(lines(&[course], false, true, false), ["course||46|-10|ok|84|50|carol|lab"]);
        assert_eq!(lines(&[lending], false, true, false), ["lab||46|-10|ok|84|50|carol|(lends)"]);
    }
}
