#!/bin/bash
# up.sh — start the multi-node test cluster (see lib.sh for its shape). Run as root, after
# tests/cluster/up.sh (it uses that cluster's test users and MUNGE key) and with the
# gputokens packages installed (the plugins in PluginDir, /usr/bin/accountd), as tests/run.sh does.
# Stops a previous multi-node cluster first: every run starts from an empty ledger and database.
#
#   ctl1  10.78.0.2   slurmctld (primary), slurmdbd, accountd serve (ledger, HTTP on :9817)
#   ctl2  10.78.0.3   slurmctld (backup)   (GPUTOKENS_MN_SLURM_HOST=ctl2: the primary and slurmdbd)
#   nodeN 10.78.0.1N  slurmd, gputokens-agent (MUNGE credentials of that node), fake NVML
#   login1 10.78.0.20 munged only: users' sbatch, sbalance (over the network to accountd)
# The site has a MariaDB of its own (lib.sh: MN_MARIADB), started here if it is not running.
# GPUTOKENS_MN_PAIR=1: the ledger on that MariaDB (database gtmn_ledger, a user of its own),
# and a second accountd serve on ctl2: a pair on one ledger, users' tools given both URLs.
# GPUTOKENS_MN_CLUSTERS=2: the ledger on MariaDB too, and a second Slurm cluster (gtmnb) on the same
# slurmdbd: ctlb 10.78.0.4 (its slurmctld, and its own accountd on the ledger), node4 10.78.0.14.
# GPUTOKENS_MN_PARTITIONS: more slurm.conf PartitionName= lines, beside the default partition gpu of
# every node. GPUTOKENS_MN_SLURM_HOST=ctl2: the primary slurmctld and slurmdbd on ctl2, the backup
# on ctl1 (a site whose accountd host can be lost while Slurm's controller and accounting stay up).
# Every host has its own munged (one shared key, as on a site). The balance snapshot and
# StateSaveLocation are in $MN/shared, a directory every host sees, as a site shares them over NFS.
set -euo pipefail
for fd in /proc/$$/fd/*; do   # daemons must not inherit the caller's descriptors (locks, pipes)
  fd=${fd##*/}
  if (( fd > 2 && fd != 255 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || die "must run as root"
for u in alice bob "$SLURM_USER" munge; do id -u "$u" >/dev/null 2>&1 || die "user $u missing: run tests/cluster/up.sh first"; done
[[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key missing: run tests/cluster/up.sh first"
ACCOUNTD=${GPUTOKENS_MN_ACCOUNTD:-/usr/bin/accountd}
[[ -x $ACCOUNTD ]] || die "$ACCOUNTD missing: install the gputokens package (tests/run.sh does)"
AGENT=${GPUTOKENS_MN_AGENT:-/usr/bin/gputokens-agent}
[[ -x $AGENT ]] || die "$AGENT missing: install the gputokens-agent package (tests/run.sh does)"
FAKE_NVML=${GPUTOKENS_MN_FAKE_NVML:?set GPUTOKENS_MN_FAKE_NVML to the built fake libnvidia-ml (target/debug/libnvidia_ml.so)}
PLUGIN_DIR=""
for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm; do
  [[ -e $d/select_cons_tres.so ]] && { PLUGIN_DIR=$d; break; }
done
[[ -n $PLUGIN_DIR ]] || die "cannot find Slurm's PluginDir"
for so in job_submit_gputokens.so spank_gputokens.so; do
  [[ -e $PLUGIN_DIR/$so ]] || die "$PLUGIN_DIR/$so missing: install the gputokens-slurm-plugins package"
done

bash "$HERE/down.sh" >/dev/null
rm -rf "$MN"
install -d -o mysql -g root -m 755 /run/mysqld /run/mariadbd   # where each host sees the site's MariaDB
install -d -m 755 /run/munge   # where each host sees its own munged (a fresh /run has none: a release's)
start_mn_mariadb
mkdir -p "$MN"/{etc/slurm/plugstack.conf.d,here,dev,shared/state,shared/snapshot,shared/controllers}
install -d -m 1777 "$MN/jobs"
chown "$SLURM_USER:" "$MN/shared/state" "$MN/shared/controllers"
CLUSTERS=${GPUTOKENS_MN_CLUSTERS:-1}
[[ $CLUSTERS == 1 || $CLUSTERS == 2 ]] || die "GPUTOKENS_MN_CLUSTERS must be 1 or 2"
echo "$CLUSTERS" > "$MN/clusters"
set_clusters "$CLUSTERS"
PRIMARY=${GPUTOKENS_MN_SLURM_HOST:-ctl1}
case $PRIMARY in
  ctl1) BACKUP=ctl2 ;;
  ctl2) BACKUP=ctl1 ;;
  *) die "GPUTOKENS_MN_SLURM_HOST must be ctl1 or ctl2" ;;
esac
if [[ $CLUSTERS == 2 ]]; then
  mkdir -p "$MN"/{etc-b/slurm/plugstack.conf.d,shared/state-b,shared/snapshot-b,shared/controllers-b}
  chown "$SLURM_USER:" "$MN/shared/state-b" "$MN/shared/controllers-b"
fi
for h in "${HOSTS[@]}"; do
  mkdir -p "$MN/hosts/$h"/{log,run,spool,gpu-jobs,nvml,gputokens}
  install -d -o munge -g munge -m 755 "$MN/hosts/$h/munge"
  chown "$SLURM_USER:" "$MN/hosts/$h/log" "$MN/hosts/$h/run"
done

# ---- configuration (every host sees $MN/etc/slurm as /etc/slurm) ---------------------------------
{
  echo "127.0.0.1 localhost"
  for h in "${HOSTS[@]}"; do echo "$(addr "$h") $h"; done
} > "$MN/etc/hosts"

# node_lines NODE...: their slurm.conf lines; gres_lines NODE...: gres.conf (each GPU a device file).
node_lines() {
  for n in "$@"; do
    echo "NodeName=$n NodeAddr=$(addr "$n") CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 Gres=$(node_gres "$n") State=UNKNOWN"
  done
}
gres_lines() {
  echo "AutoDetect=off"
  local n i type
  for n in "$@"; do
    i=0
    while read -r type; do
      [[ -e $MN/dev/$n-gpu$i ]] || mknod "$MN/dev/$n-gpu$i" c 195 "$i"
      echo "NodeName=$n Name=gpu Type=$type File=$MN/dev/$n-gpu$i"
      i=$(( i + 1 ))
    done < <(node_gpu_types "$n")
  done
}
node_lines=$(node_lines "${NODES[@]}")$'\n'
gres_lines=$(gres_lines "${NODES[@]}")
cat > "$MN/etc/slurm/slurm.conf" <<EOF
# slurm.conf of the multi-node test cluster, written by tests/multinode/up.sh.
ClusterName=$MN_CLUSTER
SlurmctldHost=$PRIMARY($(addr "$PRIMARY"))
SlurmctldHost=$BACKUP($(addr "$BACKUP"))
SlurmUser=$SLURM_USER
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
PluginDir=$PLUGIN_DIR
StateSaveLocation=$MN/shared/state
SlurmdSpoolDir=$MN/here/spool
SlurmctldPidFile=$MN/here/run/slurmctld.pid
SlurmdPidFile=$MN/here/run/slurmd.pid
SlurmctldLogFile=$MN/here/log/slurmctld.log
SlurmdLogFile=$MN/here/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
PriorityType=priority/multifactor
PriorityWeightAge=0
PriorityWeightFairshare=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# Failures are seen in seconds, not minutes: a lost node, a lost primary controller.
SlurmdTimeout=${GPUTOKENS_MN_SLURMD_TIMEOUT:-10}
SlurmctldTimeout=10
MessageTimeout=5
KillWait=5
MinJobAge=300
JobRequeue=1
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$PRIMARY
AccountingStoragePort=6819
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu,gres/gpu:rtx2080,gres/gpu:rtx3090,gres/gpu:a6000
JobSubmitPlugins=gputokens
SlurmdParameters=config_overrides
${node_lines}PartitionName=gpu Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP
${GPUTOKENS_MN_PARTITIONS:-}
EOF
printf '%s\n' "$gres_lines" > "$MN/etc/slurm/gres.conf"
if [[ $CLUSTERS == 2 ]]; then
  # The second cluster's: the first's settings, its own name, controller, state and node.
  grep -v -e '^SlurmctldHost=' -e '^NodeName=' -e '^PartitionName=' "$MN/etc/slurm/slurm.conf" \
    | sed -e "s|^ClusterName=.*|ClusterName=$MN_CLUSTER_B\nSlurmctldHost=ctlb($(addr ctlb))|" \
          -e "s|^StateSaveLocation=.*|StateSaveLocation=$MN/shared/state-b|" > "$MN/etc-b/slurm/slurm.conf"
  { node_lines node4; echo "PartitionName=gpu Nodes=node4 Default=YES MaxTime=INFINITE State=UP"; } >> "$MN/etc-b/slurm/slurm.conf"
  gres_lines node4 > "$MN/etc-b/slurm/gres.conf"
fi
# The nodes track jobs without cgroups (proctrack/linuxproc), but slurmd >= 23.02 still looks at the
# machine's cgroups when it starts and stops at this kernel's mix of v1 and v2 ("Hybrid mode is not
# supported"): it is told to leave cgroups alone (22.05 knows no "disabled", and does not look).
slurm_version=$(slurmd -V | awk '{ print $2 }')
if [[ $(printf '%s\n' "$slurm_version" 23.02 | sort -V | head -n 1) == 23.02 ]]; then
  echo "CgroupPlugin=disabled" > "$MN/etc/slurm/cgroup.conf"
fi
echo "include /etc/slurm/plugstack.conf.d/*.conf" > "$MN/etc/slurm/plugstack.conf"
echo "optional $PLUGIN_DIR/spank_gputokens.so jobs_dir=$MN/here/gpu-jobs nvml_library=$MN/here/nvml/libnvidia-ml.so.1" \
  > "$MN/etc/slurm/plugstack.conf.d/gputokens.conf"
install -m 600 -o "$SLURM_USER" /dev/null "$MN/etc/slurm/slurmdbd.conf"
cat > "$MN/etc/slurm/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$PRIMARY
DbdAddr=$(addr "$PRIMARY")
DbdPort=6819
SlurmUser=$SLURM_USER
DebugLevel=info
LogFile=$MN/here/log/slurmdbd.log
PidFile=$MN/here/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=$MN_DB
EOF
# A pair of accountd on one ledger in the site's MariaDB (over its socket, as slurmdbd reaches it).
PAIR=${GPUTOKENS_MN_PAIR:-}
ledger_table="" http_listen="$(addr ctl1):$HTTP_PORT" users_urls="\"${GPUTOKENS_MN_ACCOUNTD_URL:-http://$(addr ctl1):$HTTP_PORT}\""
if [[ -n $PAIR || $CLUSTERS == 2 ]]; then
  mn_sql -e "DROP DATABASE IF EXISTS $MN_LEDGER_DB; DROP USER IF EXISTS '$MN_LEDGER_DB'@'localhost';
    CREATE DATABASE $MN_LEDGER_DB; CREATE USER '$MN_LEDGER_DB'@'localhost' IDENTIFIED BY '$MN_LEDGER_PASS';
    GRANT ALL ON $MN_LEDGER_DB.* TO '$MN_LEDGER_DB'@'localhost';"
  install -m 600 /dev/null "$MN/etc/ledger-password"
  echo "$MN_LEDGER_PASS" > "$MN/etc/ledger-password"
  ledger_table="[ledger]
url = \"mysql://$MN_LEDGER_DB@localhost/$MN_LEDGER_DB?socket=$MN_DB_SOCKET\"
password_file = \"$MN/etc/ledger-password\""
fi
if [[ -n $PAIR ]]; then
  # Each accountd on its own host's address: one file for both.
  http_listen="0.0.0.0:$HTTP_PORT"
  users_urls="\"http://$(addr ctl1):$HTTP_PORT\", \"http://$(addr ctl2):$HTTP_PORT\""
fi
clusters_table=""
if [[ $CLUSTERS == 2 ]]; then
  clusters_table="[clusters]
names = [\"$MN_CLUSTER\", \"$MN_CLUSTER_B\"]"
fi
# accountd's config, read by every gputokens part on every host: the plugins, accountd, the agents.
# GPUTOKENS_MN_CONFIG adds tables (a test's settings) after the defaults here.
gputokens_toml() {
  local shared=$1 listen=$2 urls=$3 report_to=$4 extra=$5
  cat <<EOF
# gputokens.toml of the multi-node test cluster, written by tests/multinode/up.sh.
slurm_user = "$SLURM_USER"

[prices]
rtx2080 = 0.5
rtx3090 = 1
a6000 = 4

[paths]
# accountd runs on ctl1: its ledger and socket are that host's own ($MN/here is per host).
ledger = "$MN/here/gputokens/ledger.sqlite"
socket = "$MN/here/gputokens/accountd.sock"
# Shared by every host, as StateSaveLocation is: whichever controller is primary reads it.
snapshot = "$MN/shared/$shared/balances.snapshot"
# Each controller's job_submit plugin says here what it sees (writable by the SlurmUser).
controller_status = "$MN/shared/${shared/snapshot/controllers}"

$ledger_table

$clusters_table
$extra

[intervals]
charge = "${GPUTOKENS_MN_CHARGE:-5s}"
check = "${GPUTOKENS_MN_CHECK:-5s}"

[slurm]
first_lookback = "1h"
reread = "1h"

[http]
listen = "$listen"
# The tests follow each job by its own series (served only with per-user metrics).
per_user_metrics = true
${GPUTOKENS_MN_HTTP:-}

[accountd]
# Where users' tools on every other host (login1, the nodes) reach accountd: no socket there.
urls = [$urls]
${GPUTOKENS_MN_ACCOUNTD_KEYS:-}

[agent]
report_to = [$report_to]
interval = "2s"
nvml_library = "$MN/here/nvml/libnvidia-ml.so.1"
jobs_dir = "$MN/here/gpu-jobs"
listen = "off"
auth = "munge"

[preemption]
enabled = false

[admission]
on_error = "reject"
max_snapshot_age = "${GPUTOKENS_MN_MAX_SNAPSHOT_AGE:-2m}"
${GPUTOKENS_MN_CONFIG:-}
EOF
}
# The agents report to accountd as the users' tools reach it: a pair's both.
agents_urls="\"${GPUTOKENS_MN_ACCOUNTD_URL:-http://$(addr ctl1):$HTTP_PORT}\""
if [[ -n $PAIR ]]; then agents_urls=$users_urls; fi
gputokens_toml snapshot "$http_listen" "$users_urls" "$agents_urls" "" > "$MN/etc/slurm/gputokens.toml"
if [[ $CLUSTERS == 2 ]]; then
  # The second cluster's: its own accountd (on ctlb), snapshot and controllers, and its own price of
  # an a6000 (a cluster's GPUs of a type need not cost what another's do).
  b_url="http://$(addr ctlb):$HTTP_PORT"
  gputokens_toml snapshot-b "0.0.0.0:$HTTP_PORT" "\"$b_url\"" "\"$b_url\"" "local = \"$MN_CLUSTER_B\"" \
    | sed -e 's/^a6000 = 4$/a6000 = 2/' > "$MN/etc-b/slurm/gputokens.toml"
  cp "$MN/etc/slurm/cgroup.conf" "$MN/etc-b/slurm/" 2>/dev/null || true
  cp "$MN/etc/slurm/plugstack.conf" "$MN/etc-b/slurm/"
  cp "$MN/etc/slurm/plugstack.conf.d/gputokens.conf" "$MN/etc-b/slurm/plugstack.conf.d/"
fi

# ---- fake GPUs: each node's own NVML library and state (the agent and the SPANK plugin load it) ---
ALL_NODES=("${NODES[@]}")
[[ $CLUSTERS == 2 ]] && ALL_NODES+=(node4)
for n in "${ALL_NODES[@]}"; do
  install -m 755 "$FAKE_NVML" "$MN/hosts/$n/nvml/libnvidia-ml.so.1"
  i=0 state=""
  while read -r type; do
    state+="[[gpu]]"$'\n'"uuid = \"GPU-$n-$i\""$'\n'"name = \"NVIDIA $type\""$'\n'"util_gpu = 50"$'\n'"util_mem = 10"$'\n'
    state+="mem_used = 1048576"$'\n'"mem_total = 25769803776"$'\n'"temp = 50"$'\n'"power_mw = 100000"$'\n'
    i=$(( i + 1 ))
  done < <(node_gpu_types "$n")
  printf '%s' "$state" > "$MN/hosts/$n/nvml/libnvidia-ml.so.1.toml"
done

# ---- network: a bridge in the switch namespace, a cable (veth) to each host -----------------------
ip netns add "$SWITCH"
ip -n "$SWITCH" link add br0 type bridge
ip -n "$SWITCH" link set br0 up
for h in "${HOSTS[@]}"; do
  ip netns add "$(netns "$h")"
  ip -n "$(netns "$h")" link set lo up
  ip -n "$SWITCH" link add "v-$h" type veth peer name eth0 netns "$(netns "$h")"
  ip -n "$SWITCH" link set "v-$h" master br0 up
  ip -n "$(netns "$h")" addr add "$(addr "$h")/24" dev eth0
  ip -n "$(netns "$h")" link set eth0 up
done

bash "$HERE/mn.sh" boot-all
say "booted ${HOSTS[*]}"

# ---- accounting: slurmdbd on the primary's host ($PRIMARY), the cluster's associations -------------
mn_sql -e "DROP DATABASE IF EXISTS $MN_DB; CREATE DATABASE $MN_DB; GRANT ALL ON $MN_DB.* TO 'slurm'@'localhost';"
bash "$HERE/mn.sh" start slurmdbd "$PRIMARY"
sacctmgr_() { in_host ctl1 timeout 30 sacctmgr -i "$@" >/dev/null; }
waitfor 30 in_host ctl1 timeout 5 sacctmgr -n list cluster || die "slurmdbd does not answer: $(tail -n 20 "$MN/hosts/$PRIMARY/log/slurmdbd.log")"
sacctmgr_ add cluster "$MN_CLUSTER"
sacctmgr_ add account "$MN_ACCOUNT" cluster="$MN_CLUSTER"
sacctmgr_ add user root,alice,bob account="$MN_ACCOUNT" cluster="$MN_CLUSTER"
if [[ $CLUSTERS == 2 ]]; then
  sacctmgr_ add cluster "$MN_CLUSTER_B"
  sacctmgr_ add account "$MN_ACCOUNT" cluster="$MN_CLUSTER_B"
  sacctmgr_ add user root,alice,bob account="$MN_ACCOUNT" cluster="$MN_CLUSTER_B"
fi
say "slurmdbd up, account $MN_ACCOUNT: root alice bob"

# ---- controllers, nodes, gputokens ------------------------------------------------------------------
bash "$HERE/mn.sh" start slurmctld "$PRIMARY"
waitfor 30 in_host ctl1 timeout 5 scontrol ping || die "slurmctld on $PRIMARY does not answer: $(tail -n 20 "$MN/hosts/$PRIMARY/log/slurmctld.log")"
bash "$HERE/mn.sh" start slurmctld "$BACKUP"
for n in "${NODES[@]}"; do bash "$HERE/mn.sh" start slurmd "$n"; done
all_idle() { [[ $(in_host ctl1 sinfo -h -N -o %T | sort -u) == idle ]]; }
waitfor 60 all_idle || die "nodes not idle: $(in_host ctl1 sinfo -N -o '%N %T %E')"
standby() { in_host ctl1 timeout 5 scontrol ping | grep -q "$BACKUP.* is UP"; }
waitfor 30 standby || die "the backup slurmctld on $BACKUP is not UP: $(in_host ctl1 scontrol ping; tail -n 20 "$MN/hosts/$BACKUP/log/slurmctld.log")"
# A primary that has run a while has saved its state (every five minutes, and at a reconfigure),
# the associations with it. A backup taking over from one that never did stops: on 23.11+ "fatal: No
# Assoc usage file"; on 22.05, where slurmdbd is lost too, "fatal: slurmdbd and/or database must be
# up at slurmctld start time". This one saves it now, as a site's would have by the time it is lost.
in_host ctl1 timeout 30 scontrol reconfigure >/dev/null || die "scontrol reconfigure failed"
for saved in assoc_mgr_state assoc_usage; do
  waitfor 30 test -e "$MN/shared/state/$saved" || die "$PRIMARY saved no $saved at scontrol reconfigure"
done
waitfor 30 standby || die "$PRIMARY and $BACKUP not both UP after scontrol reconfigure: $(in_host ctl1 scontrol ping)"
say "slurmctld on $PRIMARY (primary) and $BACKUP (backup), nodes ${NODES[*]} idle"

bash "$HERE/mn.sh" start accountd ctl1
if [[ -n $PAIR ]]; then
  # ctl1's leads (it took the lease first); ctl2's follows, and takes over when ctl1's is lost.
  waitfor 30 grep -q 'leading the ledger' "$MN/hosts/ctl1/log/accountd.out" \
    || die "accountd on ctl1 does not lead: $(tail -n 20 "$MN/hosts/ctl1/log/accountd.out")"
  bash "$HERE/mn.sh" start accountd ctl2
  waitfor 30 grep -q 'following' "$MN/hosts/ctl2/log/accountd.out" \
    || die "accountd on ctl2 does not follow: $(tail -n 20 "$MN/hosts/ctl2/log/accountd.out")"
fi
for n in "${NODES[@]}"; do bash "$HERE/mn.sh" start agent "$n"; done
waitfor 30 test -s "$MN/shared/snapshot/balances.snapshot" || die "accountd wrote no snapshot: $(tail -n 20 "$MN/hosts/ctl1/log/accountd.out")"
# Both controllers' plugins decide from it (the standby's too: it loads its plugins while waiting),
# and each says so in its status file.
for c in "${CONTROLLERS[@]}"; do
  waitfor 30 grep -q '"state": "ready"' "$MN/shared/controllers/$c.json" \
    || die "the job_submit plugin on $c does not see the snapshot: $(cat "$MN/shared/controllers/$c.json" 2>&1; grep gputokens "$MN/hosts/$c/log/slurmctld.log" | tail -n 5)"
done
if [[ $CLUSTERS == 2 ]]; then
  # The second cluster: its controller, its node, and its own accountd on the one ledger, leading
  # that cluster's cycles (its own lease) beside ctl1's.
  bash "$HERE/mn.sh" start slurmctld ctlb
  waitfor 30 in_host ctlb timeout 5 scontrol ping || die "slurmctld on ctlb does not answer: $(tail -n 20 "$MN/hosts/ctlb/log/slurmctld.log")"
  bash "$HERE/mn.sh" start slurmd node4
  b_idle() { [[ $(in_host ctlb sinfo -h -N -o %T | sort -u) == idle ]]; }
  waitfor 60 b_idle || die "node4 not idle: $(in_host ctlb sinfo -N -o '%N %T %E')"
  bash "$HERE/mn.sh" start accountd ctlb
  waitfor 30 grep -q 'leading the ledger' "$MN/hosts/ctlb/log/accountd.out" \
    || die "accountd on ctlb does not lead its cluster: $(tail -n 20 "$MN/hosts/ctlb/log/accountd.out")"
  bash "$HERE/mn.sh" start agent node4
  waitfor 30 grep -q '"state": "ready"' "$MN/shared/controllers-b/ctlb.json" \
    || die "the job_submit plugin on ctlb does not see its snapshot: $(cat "$MN/shared/controllers-b/ctlb.json" 2>&1; grep gputokens "$MN/hosts/ctlb/log/slurmctld.log" | tail -n 5)"
  say "second cluster $MN_CLUSTER_B up: slurmctld on ctlb, node4, accountd on ctlb"
fi
say "multi-node cluster up in $(elapsed)s: ${HOSTS[*]}"
