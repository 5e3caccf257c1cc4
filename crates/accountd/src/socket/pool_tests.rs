//! The pool requests as each kind of caller makes them: admins, a coordinator (of the account or of
//! one above it), a member, a stranger.

use std::path::Path;

use gputokens::access::Caller;
use gputokens::protocol::{ErrorKind, PoolRules, Reply, Request};
use gputokens::slurm::associations::AccountTree;
use gputokens::statement::Month;
use gputokens::Config;
use gputokens::Tokens;
use ledger::Ledger;

use crate::answering::Answering;
use crate::resources::Resources;
use crate::socket::handler::handle;

const NOW: i64 = 1_795_700_000;

fn answering(dir: &Path) -> Answering {
    let text = format!(
        "[accounts]\nmode = \"account\"\ninitial = 100\ndaily = 0\nmonthly = 30\n[prices]\na6000 = 4\n[paths]\n\
         ledger = \"{0}/ledger.sqlite\"\nsnapshot = \"{0}/balances.snapshot\"\nsocket = \"{0}/accountd.sock\"\n",
        dir.display()
    );
    let config = Config::parse(&text, Path::new("test.toml")).unwrap();
    let ledger = Ledger::open(&config.paths.ledger, (&config).into()).unwrap();
    let a = Answering::new(Resources::new(config, ledger)).unwrap();
    let accounts = AccountTree::parse(
        "root||\nphysics|root|\nlab|physics|\nlab||alice\nlab||bob\ncourse|root|\ncourse||bob\ncourse||carol\n",
        "physics|pi\ncourse|carol\n",
    );
    a.publisher.set_view(crate::slurm_view::SlurmView { accounts, ..Default::default() });
    a
}

fn who(name: &str, admin: bool) -> Caller {
    Caller { uid: if admin { 0 } else { 1000 }, name: name.into(), admin }
}

fn refused(reply: &Reply) -> bool {
    matches!(reply, Reply::Error { kind: ErrorKind::Refused, .. })
}

fn grant(a: &mut Answering, caller: &Caller, account: &str, amount: &str) -> Reply {
    let request = Request::PoolGrant {
        account: account.into(),
        amount: amount.parse().unwrap(),
        reason: "term".into(),
        key: None,
        adjust: false,
        expires: None,
    };
    handle(a, caller, request, NOW).0
}

fn pool_balance(a: &Answering, account: &str) -> Tokens {
    a.res.ledger.pool(account).unwrap().unwrap().balance
}

fn add(a: &mut Answering, account: &str) {
    let request = Request::PoolSet { account: account.into(), create: true, rules: PoolRules::default(), key: None };
    let reply = handle(a, &who("root", true), request, NOW).0;
    assert!(matches!(reply, Reply::Pools { .. }), "{reply:?}");
}

#[test]
fn only_admins_create_pools_with_the_configs_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    let by_carol = Request::PoolSet { account: "course".into(), create: true, rules: PoolRules::default(), key: None };
    assert!(refused(&handle(&mut a, &who("carol", false), by_carol, NOW).0));
    add(&mut a, "lab");
    let pool = a.res.ledger.pool("lab").unwrap().unwrap();
    assert_eq!(
        (pool.balance, pool.rules.monthly, pool.rules.daily),
        (Tokens::whole(100), Tokens::whole(30), Tokens::ZERO)
    );
    let limit = PoolRules { user_limit: Some(Tokens::whole(10)), ..Default::default() };
    let set = Request::PoolSet { account: "lab".into(), create: false, rules: limit, key: None };
    assert!(matches!(handle(&mut a, &who("root", true), set, NOW).0, Reply::Pools { .. }));
    assert_eq!(a.res.ledger.pool("lab").unwrap().unwrap().user_limit, Some(Tokens::whole(10)));
}

#[test]
fn coordinators_grant_within_their_accounts_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    add(&mut a, "lab");
    add(&mut a, "course");
    assert!(matches!(grant(&mut a, &who("carol", false), "course", "20"), Reply::Recorded { .. }));
    assert!(refused(&grant(&mut a, &who("carol", false), "lab", "20")), "carol does not coordinate lab");
    assert!(refused(&grant(&mut a, &who("alice", false), "lab", "20")), "a member is not a coordinator");
    assert!(matches!(grant(&mut a, &who("pi", false), "lab", "5"), Reply::Recorded { .. }), "physics is above lab");
    assert_eq!((pool_balance(&a, "course"), pool_balance(&a, "lab")), (Tokens::whole(120), Tokens::whole(105)));
    let history = a.res.ledger.history(&gputokens::pools::holder("course")).unwrap();
    assert_eq!(history.last().unwrap().actor, "carol", "audited with who granted");
    // A coordinator may not adjust, nor reach a user's own bucket.
    let adjust = Request::PoolGrant {
        account: "course".into(),
        amount: "-5".parse().unwrap(),
        reason: "x".into(),
        key: None,
        adjust: true,
        expires: None,
    };
    assert!(refused(&handle(&mut a, &who("carol", false), adjust, NOW).0));
    let own = Request::Grant {
        user: "carol".into(),
        amount: "5".parse().unwrap(),
        reason: "x".into(),
        key: None,
        expires: None,
    };
    assert!(refused(&handle(&mut a, &who("carol", false), own, NOW).0));
}

#[test]
fn transfers_need_both_ends_and_move_both_or_neither() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    add(&mut a, "lab");
    add(&mut a, "course");
    let transfer = |from: &str, to: &str| Request::Transfer {
        from: from.into(),
        to: to.into(),
        amount: "30".parse().unwrap(),
        reason: "share".into(),
        key: Some("t1".into()),
    };
    assert!(refused(&handle(&mut a, &who("carol", false), transfer("course", "lab"), NOW).0), "carol: course only");
    let reply = handle(&mut a, &who("root", true), transfer("course", "lab"), NOW).0;
    let Reply::Recorded { entries, .. } = reply else { panic!("{reply:?}") };
    assert_eq!(entries.len(), 2);
    assert_eq!((pool_balance(&a, "course"), pool_balance(&a, "lab")), (Tokens::whole(70), Tokens::whole(130)));
    let again = handle(&mut a, &who("root", true), transfer("course", "lab"), NOW).0;
    assert!(matches!(again, Reply::Recorded { replayed: true, .. }), "{again:?}");
    let nowhere = handle(&mut a, &who("root", true), transfer("course", "nowhere"), NOW).0;
    assert!(matches!(nowhere, Reply::Error { kind: ErrorKind::Invalid, .. }), "{nowhere:?}");
    assert_eq!(pool_balance(&a, "course"), Tokens::whole(70), "nothing moved");
}

#[test]
fn members_see_their_pools_and_only_their_own_spending() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    add(&mut a, "lab");
    add(&mut a, "course");
    let list = |a: &mut Answering, caller: &Caller, account: Option<&str>| {
        handle(a, caller, Request::Pools { account: account.map(str::to_string) }, NOW).0
    };
    let Reply::Pools { rows, .. } = list(&mut a, &who("alice", false), None) else { panic!() };
    assert_eq!(rows.iter().map(|r| r.account.as_str()).collect::<Vec<_>>(), ["lab"]);
    assert_eq!(rows[0].members.iter().map(|m| m.user.as_str()).collect::<Vec<_>>(), ["alice"]);
    assert!(refused(&list(&mut a, &who("alice", false), Some("course"))));
    let Reply::Pools { rows, .. } = list(&mut a, &who("pi", false), Some("lab")) else { panic!() };
    assert_eq!(rows[0].members.len(), 2, "the coordinator above sees every member");
    let statement = || Request::Statement {
        month: Month::of(gputokens::time::local_date(NOW)),
        user: None,
        all: false,
        account: Some("lab".into()),
    };
    assert!(refused(&handle(&mut a, &who("alice", false), statement(), NOW).0));
    let Reply::Statements { statements } = handle(&mut a, &who("pi", false), statement(), NOW).0 else { panic!() };
    assert_eq!((statements[0].user.as_str(), statements[0].closing), ("lab", Tokens::whole(100)));
}

#[test]
fn an_import_creates_the_missing_pools_in_one_go_and_leaves_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    add(&mut a, "lab");
    let rules = |initial: i64| PoolRules { initial: Some(Tokens::whole(initial)), ..Default::default() };
    let pools = std::collections::BTreeMap::from([
        ("lab".into(), rules(5)),
        ("course".into(), rules(7)),
        ("ops".into(), rules(9)),
    ]);
    let by_carol = Request::PoolImport { pools: pools.clone() };
    assert!(refused(&handle(&mut a, &who("carol", false), by_carol, NOW).0));
    let (reply, changed) = handle(&mut a, &who("root", true), Request::PoolImport { pools }, NOW);
    assert_eq!(reply, Reply::PoolsImported { created: vec!["course".into(), "ops".into()], already: 1 });
    assert!(changed);
    assert_eq!((pool_balance(&a, "lab"), pool_balance(&a, "ops")), (Tokens::whole(100), Tokens::whole(9)));
    let bad = std::collections::BTreeMap::from([("new".into(), rules(1)), ("a b".into(), rules(1))]);
    let reply = handle(&mut a, &who("root", true), Request::PoolImport { pools: bad }, NOW).0;
    assert!(matches!(reply, Reply::Error { kind: ErrorKind::Invalid, .. }), "{reply:?}");
    assert!(a.res.ledger.pool("new").unwrap().is_none(), "all or none");
}

#[test]
fn a_users_own_balance_names_the_pool_of_their_default_account() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = answering(dir.path());
    add(&mut a, "lab");
    let mut view = (*a.slurm_view()).clone();
    view.default_accounts.insert("alice".into(), "lab".into());
    a.publisher.set_view(view);
    let own = handle(&mut a, &who("alice", false), Request::Balances { users: vec![], all: false }, NOW).0;
    let Reply::Balances { rows, .. } = own else { panic!("{own:?}") };
    let pool = rows[0].default_pool.as_ref().expect("lab pays for alice's jobs without -A");
    assert_eq!((pool.account.as_str(), pool.balance), ("lab", Tokens::whole(100)));
    let by_root =
        handle(&mut a, &who("root", true), Request::Balances { users: vec!["alice".into()], all: false }, NOW).0;
    let Reply::Balances { rows, .. } = by_root else { panic!() };
    assert_eq!(rows[0].default_pool, None, "only the caller's own row");
}
