//! A new site's first day: it charges nothing that ended before it began charging, however far back
//! its first sacct window reaches (`first_lookback`, a day by default), and everything that ends after.

use gputokens::pricing::cost;
use gputokens::Tokens;

use crate::charging::{balance, elapsed};
use crate::cluster::{sbatch, serial, wait_finished};
use crate::common::Site;

#[test]
#[ignore = "needs the test cluster: tests/cluster/up.sh"]
fn a_new_site_never_charges_jobs_that_ended_before_it_began() {
    let _cluster = serial();
    let before = sbatch("bob", &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&before), "COMPLETED");
    // The default first_lookback (a day): the first window holds `before` and every job the cluster
    // ran today, and sacct lists them.
    let site = Site::start("", "[slurm]\nreread = \"1h\"\n[preemption]\nenabled = false\n");
    let tick = site.accountd(None, &["tick"]).ok().stdout;
    assert!(tick.contains("runs that ended before gputokens began charging left out"), "{tick}");
    assert!(tick.contains(": 0 charge entries"), "{tick}");
    assert_eq!(balance(&site, "bob"), Tokens::whole(100), "job {before} ended before the site began:\n{tick}");

    // A job that ends after the site began is charged in full, once.
    let after = sbatch("bob", &["--gres=gpu:a6000:1", "--wrap", "sleep 2"]);
    assert_eq!(wait_finished(&after), "COMPLETED");
    site.accountd(None, &["tick"]).ok();
    site.accountd(None, &["tick"]).ok();
    assert_eq!(balance(&site, "bob"), Tokens::whole(100) - cost(Tokens::whole(4), elapsed(&after)));
}
