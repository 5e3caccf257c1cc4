//! Random job descriptions through the exported `job_submit` and `job_modify`, as slurmctld calls
//! them: every string field is allocated with the (counted) `slurm_xstrdup` stand-in, as slurmctld's
//! xmalloc'ed ones are, and freed afterwards with the `slurm_xfree` stand-in. Whatever the
//! description, the call returns SUCCESS or a refusal with a message, no panic reaches the boundary
//! (it would log "panicked"), and every string the plugin allocated is one the caller frees.

use std::ffi::{c_char, c_int, CStr, CString};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use crate::bindings::{job_desc_msg_t, INFINITE, NO_VAL, NO_VAL16};
use crate::ffi::ESTIMATE_VARIABLE;
use crate::{job_modify, job_submit, plugin, SUCCESS};
use slurm_ffi::stand_ins;

/// The fields a job description gets, before they become C strings.
#[derive(Debug, Clone)]
struct Fields {
    user_id: u32,
    submit_uid: u32,
    nice: u32,
    tres: [Option<String>; 4],
    time_limit: u32,
    partition: Option<String>,
    account: Option<String>,
    qos: Option<String>,
    min_nodes: u32,
    num_tasks: u32,
    ntasks_per_node: u16,
    sockets_per_node: u16,
    array_inx: Option<String>,
    job_id_str: Option<String>,
    job_id: u32,
    spank_env: Vec<String>,
}

fn uid() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0), Just(NO_VAL), Just(1001), Just(4242), any::<u32>()]
}

fn count32() -> impl Strategy<Value = u32> {
    prop_oneof![Just(NO_VAL), Just(INFINITE), 0..64u32, any::<u32>()]
}

fn count16() -> impl Strategy<Value = u16> {
    prop_oneof![Just(NO_VAL16 as u16), 0..16u16, any::<u16>()]
}

/// A `tres_per_*` string: well-formed GPU entries with any count, or anything at all.
fn tres() -> impl Strategy<Value = Option<String>> {
    let entry = (
        prop_oneof![Just("gres:"), Just("gres/")],
        prop_oneof![Just("gpu"), Just("shard"), Just("mps"), Just("nic")],
        proptest::option::of(prop_oneof![Just("a6000"), Just("rtx2080"), Just("h100"), Just("")]),
        prop_oneof![
            (0..10u64).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            "[0-9]{1,25}[kmgt]?"
        ],
    )
        .prop_map(|(prefix, kind, gpu_type, count)| match gpu_type {
            Some(t) => format!("{prefix}{kind}:{t}:{count}"),
            None => format!("{prefix}{kind}:{count}"),
        });
    proptest::option::of(prop_oneof![
        4 => proptest::collection::vec(entry, 1..3).prop_map(|e| e.join(",")),
        1 => "\\PC{0,30}",
    ])
}

fn name() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![Just("gpu".to_string()), Just("overdraft".to_string()), "\\PC{0,12}"])
}

fn fields() -> impl Strategy<Value = Fields> {
    let ids = (uid(), uid(), prop_oneof![Just(NO_VAL), any::<u32>()], count32());
    let shape = (count32(), count32(), count16(), count16());
    let strings =
        ([tres(), tres(), tres(), tres()], name(), name(), name(), proptest::option::of("[0-9,:%-]{0,12}|\\PC{0,12}"));
    let update = (proptest::option::of("[0-9]{1,12}(_[0-9]+)?|\\PC{0,8}"), any::<u32>());
    let env = proptest::collection::vec(prop_oneof![Just(ESTIMATE_VARIABLE.to_string()), "\\PC{0,20}"], 0..3);
    (ids, shape, strings, update, env).prop_map(
        |(
            (user_id, submit_uid, nice, time_limit),
            (min_nodes, num_tasks, ntasks_per_node, sockets_per_node),
            (tres, partition, account, qos, array_inx),
            (job_id_str, job_id),
            spank_env,
        )| Fields {
            user_id,
            submit_uid,
            nice,
            tres,
            time_limit,
            partition,
            account,
            qos,
            min_nodes,
            num_tasks,
            ntasks_per_node,
            sockets_per_node,
            array_inx,
            job_id_str,
            job_id,
            spank_env,
        },
    )
}

/// A copy of `text` from the counted `slurm_xstrdup`, as slurmctld's strings are xmalloc'ed.
fn xstr(text: &Option<String>) -> *mut c_char {
    match text {
        None => std::ptr::null_mut(),
        Some(t) => {
            let c = CString::new(t.replace('\0', "")).unwrap();
            unsafe { stand_ins::slurm_xstrdup(c.as_ptr()) }
        }
    }
}

fn xfree(p: &mut *mut c_char) {
    unsafe { stand_ins::slurm_xfree((p as *mut *mut c_char).cast()) }
}

/// A job description built from `f`; `env` keeps the SPANK environment's pointer array alive.
fn description(f: &Fields, env: &mut Vec<*mut c_char>) -> job_desc_msg_t {
    *env = f.spank_env.iter().map(|v| xstr(&Some(v.clone()))).collect();
    let mut desc = job_desc_msg_t {
        user_id: f.user_id,
        nice: f.nice,
        tres_per_job: xstr(&f.tres[0]),
        tres_per_node: xstr(&f.tres[1]),
        tres_per_task: xstr(&f.tres[2]),
        tres_per_socket: xstr(&f.tres[3]),
        time_limit: f.time_limit,
        partition: xstr(&f.partition),
        account: xstr(&f.account),
        qos: xstr(&f.qos),
        min_nodes: f.min_nodes,
        num_tasks: f.num_tasks,
        ntasks_per_node: f.ntasks_per_node,
        sockets_per_node: f.sockets_per_node,
        array_inx: xstr(&f.array_inx),
        job_id_str: xstr(&f.job_id_str),
        spank_job_env: if env.is_empty() { std::ptr::null_mut() } else { env.as_mut_ptr() },
        spank_job_env_size: env.len() as u32,
        ..Default::default()
    };
    crate::ffi::set_numeric_job_id(&mut desc, f.job_id);
    desc
}

/// Frees what slurmctld would free after the call: every string of the description and the message.
fn release(desc: &mut job_desc_msg_t, env: &mut [*mut c_char], err: &mut *mut c_char) {
    for field in [
        &mut desc.tres_per_job,
        &mut desc.tres_per_node,
        &mut desc.tres_per_task,
        &mut desc.tres_per_socket,
        &mut desc.partition,
        &mut desc.account,
        &mut desc.qos,
        &mut desc.array_inx,
        &mut desc.job_id_str,
    ] {
        xfree(field);
    }
    env.iter_mut().for_each(xfree);
    xfree(err);
}

#[cfg(not(slurm_job_modify_err_msg))]
fn modify(desc: &mut job_desc_msg_t, uid: u32, _err: &mut *mut c_char) -> c_int {
    unsafe { job_modify(desc, std::ptr::null_mut(), uid) }
}

#[cfg(slurm_job_modify_err_msg)]
fn modify(desc: &mut job_desc_msg_t, uid: u32, err: &mut *mut c_char) -> c_int {
    unsafe { job_modify(desc, std::ptr::null_mut(), uid, err) }
}

/// One call on a fresh description: the verdict is well-formed (a refusal says why when
/// `refusals_told`) and nothing leaks.
fn check(
    f: &Fields,
    refusals_told: bool,
    call: impl Fn(&mut job_desc_msg_t, &mut *mut c_char) -> c_int,
) -> Result<(), TestCaseError> {
    let before = stand_ins::allocations();
    let mut env = Vec::new();
    let mut desc = description(f, &mut env);
    let mut err: *mut c_char = std::ptr::null_mut();
    let code = call(&mut desc, &mut err);
    let message = (!err.is_null()).then(|| unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned());
    prop_assert!(code == SUCCESS || code == 2050, "code {code}");
    if let Some(m) = &message {
        prop_assert!(m.starts_with("gputokens: "), "{m}");
    }
    prop_assert!(code == SUCCESS || message.is_some() || !refusals_told, "refused without a message");
    release(&mut desc, &mut env, &mut err);
    let (allocated, freed) = stand_ins::allocations();
    prop_assert_eq!(allocated - before.0, freed - before.1, "strings allocated and freed");
    Ok(())
}

fn snapshot(now: u64) -> String {
    format!(
        "gputokens-snapshot 1\ngenerated {now}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n\
         user root -2000000\nuser alice -2000000\nsharing 4 100\nprice a6000 4000000\nprice rtx2080 500000\n\
         partition gpu default 3600 7200\naccount alice physics\nqueue {now}\ncommitted root 2000 8000000\n\
         pending 41 1 1 1 3600 1000 4000000\npending 42 2 8 1 86400\n"
    )
}

#[test]
fn random_descriptions_never_panic_or_leak() {
    let _g = crate::tests::GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("balances.snapshot");
    let conf = dir.path().join("gputokens.toml");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    gputokens::snapshot::write_atomically(&snap, &snapshot(now)).unwrap();
    // Two settings, so every path is taken: the estimate, the GPU limit, the time limit, and the
    // overdraft QOS (which replaces the description's qos string: xfree and xstrdup).
    for admission in [
        "mode = \"estimate\"\nmax_gpus_per_user = 8\nmax_job_duration = \"2h\"\ndeprioritize = \"qos\"\nqos = \"overdraft\"",
        "deprioritize = \"nice\"\nmax_job_duration = \"100000d\"",
    ] {
        let text = format!("[paths]\nsnapshot = \"{}\"\n[admission]\n{admission}\n", snap.display());
        std::fs::write(&conf, text).unwrap();
        plugin::start(&conf);
        let logged_before = stand_ins::LOG.lock().unwrap().len();
        let mut runner = TestRunner::new(ProptestConfig::default());
        let result = runner.run(&fields(), |f| {
            check(&f, true, |desc, err| unsafe { job_submit(desc, f.submit_uid, err) })?;
            // 22.05's job_modify has no message to give.
            check(&f, cfg!(slurm_job_modify_err_msg), |desc, err| modify(desc, f.submit_uid, err))
        });
        plugin::stop();
        result.unwrap();
        let log = stand_ins::LOG.lock().unwrap()[logged_before..].join("\n");
        assert!(!log.contains("panicked"), "{log}");
    }
}
