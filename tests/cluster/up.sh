#!/bin/bash
# up.sh — start (or repair) a real one-node Slurm test cluster on loopback (22.05 on Debian 12; 24.11
# and 26.05 inside tests/slurm-releases/' root filesystems). Run as root.
#
#   munged (as user munge) -> MariaDB -> slurmdbd, slurmctld (as SlurmUser slurm) -> slurmd, with fake typed GPUs
#   (4 x rtx2080, 2 x rtx3090, 2 x a6000, 2 MIG slices a100_3g.20gb as mknod'ed char devices), partition `gpu`, users alice, bob and
#   carol and the cluster tests' sets alice001 bob001 carol001 … alice120 bob120 carol120 (lib.sh; created if
#   missing) plus root in Slurm account `gputokens`.
#
# Idempotent: daemons that are already running (PID in $LAB/pids/NAME.pid, still that executable) are
# kept; stale pidfiles are replaced by a fresh start; a daemon whose config or plugin changed since it
# was started is restarted. PIDs of everything started here go to $LAB/pids/*.pid (down.sh stops those).
#
# Environment:
#   GPUTOKENS_LAB               lab dir (state, logs, pids, fake devices); default /tmp/gputokens-cluster
#   JOBSUBMIT_PLUGIN_SO         built job_submit plugin: installed as PluginDir/job_submit_gputokens.so,
#                               JobSubmitPlugins=gputokens
#   SPANK_PLUGIN_SO             built SPANK plugin: installed as PluginDir/spank_gputokens.so and
#                               listed (optional) in /etc/slurm/plugstack.conf.d/gputokens.conf
#   SPANK_PLUGIN_ARGS           arguments appended to that plugstack line
#   GPUTOKENS_PLUGINS=installed instead of the two above: load the plugins the gputokens-slurm-plugins
#                               package installed in PluginDir (checked with dpkg --verify),
#                               JobSubmitPlugins=gputokens, SPANK_PLUGIN_ARGS written into the
#                               package's /etc/slurm/plugstack.conf.d/gputokens.conf
#   GPUTOKENS_EXTRA_SLURM_CONF  extra slurm.conf lines; a Key=value line replaces the template's Key
#   GPUTOKENS_CGROUP=v2         slurmd tracks jobs with proctrack/cgroup on cgroup/v2 (IgnoreSystemd=yes:
#                               no systemd here) in /sys/fs/cgroup, which must be a cgroup2 mount of the
#                               run's own (tests/slurm-releases/enter.sh sets this up); unset: no cgroups
#                               (proctrack/linuxproc), as on the host's 22.05
#   GPUTOKENS_CGROUP_SHIM       library preloaded into slurmd in that mode (cgroup-v2-only.so)
#   GPUTOKENS_CGROUP_CONF       extra cgroup.conf lines in that mode (e.g. CgroupJobIdPaths=yes)
#   SLURM_PLUGIN_DIR            override the detected PluginDir
set -euo pipefail
# The daemons started here must not inherit the caller's descriptors: a lock the caller holds with
# flock (the cluster tests' lock, bench/admission.sh) would stay held for as long as they run. Close
# everything above stderr except 255, from which bash reads this script.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if (( fd > 2 && fd != 255 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || die "must run as root"
for b in slurmctld slurmd slurmdbd munged mariadbd; do
  [[ -x /usr/sbin/$b ]] || die "/usr/sbin/$b missing: run tests/cluster/install.sh first"
done
mkdir -p "$LAB"/{pids,run,log,state/ctld,state/d,dev}
install -d -m 1777 "$LAB/jobs"                       # a place any test user can sbatch from
say "lab dir $LAB (host $HOST)"

# ---- every name the daemons look up must resolve, before any daemon starts -----------------------
# slurm.conf and slurmdbd.conf name localhost and this host; a root filesystem without them in
# /etc/hosts sends those names to DNS, which the test namespaces cannot reach, and every daemon and
# sacctmgr call would wait on it. Fail now, naming the cause.
resolve() { { timeout -k 2 "$T_PROBE" getent ahosts "$1" 2>/dev/null || true; } | awk '{ print $1 }' | sort -u | paste -sd' '; }
addrs=$(resolve localhost)
[[ $addrs =~ (^| )(127\.[0-9.]+|::1)( |$) ]] || die "'localhost' does not resolve to a loopback address \
(getent ahosts localhost: '${addrs:-no address}'): /etc/hosts needs '127.0.0.1 localhost' and \
'::1 localhost ip6-localhost ip6-loopback' (tests/slurm-releases/rootfs.sh writes them into the root \
filesystems it builds). slurm.conf and slurmdbd.conf name localhost: without it slurmdbd, slurmctld and \
sacctmgr cannot reach each other."
if [[ -z $(resolve "$HOST") ]]; then
  echo "127.0.0.1 $HOST" >> /etc/hosts
  say "added $HOST to /etc/hosts"
fi

PLUGIN_DIR=${SLURM_PLUGIN_DIR:-}
if [[ -z $PLUGIN_DIR ]]; then
  for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    if [[ -e $d/select_cons_tres.so ]]; then PLUGIN_DIR=$d; break; fi
  done
fi
[[ -n $PLUGIN_DIR && -d $PLUGIN_DIR ]] || die "cannot find the Slurm PluginDir (set SLURM_PLUGIN_DIR)"

render() {
  sed -e "s|@HOST@|$HOST|g" -e "s|@LAB@|$LAB|g" -e "s|@CLUSTER@|$CLUSTER|g" \
      -e "s|@PLUGIN_DIR@|$PLUGIN_DIR|g" -e "s|@DBNAME@|$DBNAME|g" -e "s|@DBPASS@|$DBPASS|g" \
      -e "s|@SLURM_USER@|$SLURM_USER|g" "$1"
}
# conf_hosts: the host names and addresses a slurm.conf or slurmdbd.conf on stdin makes its daemons
# look up (SlurmctldHost's address in parentheses when it has one; a node's NodeAddr, else its name
# unless that is a host list).
conf_hosts() {
  awk '{ sub(/#.*/, "") }
    match($0, /^[[:space:]]*(SlurmctldHost|ControlMachine|BackupController|AccountingStorageHost|DbdHost|DbdBackupHost|StorageHost)=[^[:space:]]+/) {
      v = substr($0, RSTART, RLENGTH); sub(/^[^=]*=/, "", v)
      if (match(v, /\(.*\)/)) v = substr(v, RSTART + 1, RLENGTH - 2)
      print v }
    /^[[:space:]]*NodeName=/ {
      name = ""; addr = ""
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^NodeName=/) name = substr($i, 10)
        if ($i ~ /^NodeAddr=/) addr = substr($i, 10)
      }
      if (addr != "") print addr; else if (name !~ /[][,]/ && name != "DEFAULT") print name }' | sort -u
}
unresolved=()
while read -r name; do
  if [[ -n $name && -z $(resolve "$name") ]]; then unresolved+=("$name"); fi
done < <( { render "$HERE/slurm.conf.in"; printf '%s\n' "${GPUTOKENS_EXTRA_SLURM_CONF:-}"; render "$HERE/slurmdbd.conf.in"; } | conf_hosts)
(( ${#unresolved[@]} == 0 )) || die "host name(s) in slurm.conf or slurmdbd.conf do not resolve within ${T_PROBE}s: \
${unresolved[*]} (getent ahosts finds nothing; /etc/hosts or DNS must know them, or the daemons would \
wait on them)"
say "names resolve: localhost ($addrs), $HOST"

# ---- test users ----------------------------------------------------------------------------------
# TEST_USERS and every cluster test's set (SET_USERS): /etc/passwd read once, only the missing made.
declare -A have_user=()
while IFS=: read -r u _; do have_user[$u]=1; done < /etc/passwd
made=()
for u in "${TEST_USERS[@]}" "${SET_USERS[@]}"; do
  [[ -n ${have_user[$u]:-} ]] && continue
  useradd -m -s /bin/bash "$u" || die "useradd $u failed"
  made+=("$u")
done
if (( ${#made[@]} )); then say "created users $(some_of "${made[@]}")"; fi

# ---- the SlurmUser: slurmctld and slurmdbd run as it; their state, logs and pidfiles are its own --
if ! id -u "$SLURM_USER" >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$SLURM_USER"
  say "created system user $SLURM_USER"
fi
chown -R "$SLURM_USER:" "$LAB/state/ctld"
for f in slurmctld.log slurmdbd.log; do
  touch "$LAB/log/$f"
  chown "$SLURM_USER:" "$LAB/log/$f"
done
chgrp "$SLURM_USER" "$LAB/run"
chmod 775 "$LAB/run"

# ---- munge ---------------------------------------------------------------------------------------
munge_ok() { timeout -k 2 "$T_PROBE" munge -n 2>/dev/null | timeout -k 2 "$T_PROBE" unmunge >/dev/null 2>&1; }
if p=$(our_pid munged munged); then
  say "munged already running (pid $p)"
else
  rm -f "$LAB/pids/munged.pid"
  # (munge -n retries for ~2 s when no munged listens: only ask when some munged is running)
  if proc_is "$(cat /run/munge/munged.pid 2>/dev/null || true)" munged && munge_ok; then
    say "munged: one not started by up.sh answers; using it (down.sh leaves it alone)"
  else
    if [[ ! -s /etc/munge/munge.key ]]; then        # munge's postinst normally created it
      mungekey --create --force --keyfile=/etc/munge/munge.key
      say "created /etc/munge/munge.key"
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    install -d -o munge -g munge -m 755 /run/munge
    rm -f /run/munge/munged.pid
    # as root munged refuses ("Logfile is insecure"); it daemonizes and writes its own pidfile
    runuser -u munge -- /usr/sbin/munged </dev/null >>"$LAB/log/munged.stdout" 2>&1
    waitfor 5 test -s /run/munge/munged.pid || die "munged wrote no pidfile"
    p=$(</run/munge/munged.pid)
    proc_is "$p" munged || die "munged (pid $p) is not running; see /var/log/munge/munged.log"
    echo "$p" > "$LAB/pids/munged.pid"
    waitfor 5 munge_ok || die "munge -n | unmunge fails"
    say "started munged (pid $p)"
  fi
fi

# ---- fake GPU device nodes (gres.conf File= must be char/block devices) --------------------------
for i in 0 1 2 3 4 5 6 7 8 9; do
  d="$LAB/dev/gpu$i"
  [[ -c $d ]] && continue
  rm -f "$d"
  if ! mknod "$d" c 195 "$i" 2>/dev/null; then
    ln -s /dev/null "$d"                           # no CAP_MKNOD: fine as long as ConstrainDevices is off
    say "WARNING: mknod failed, $d -> /dev/null"
  fi
done

# ---- configs -------------------------------------------------------------------------------------
# put DEST MODE CONTENT: write DEST only when its content differs (keeps mtimes stable on re-runs).
put() {
  local dest=$1 mode=$2 tmp
  tmp=$(mktemp "$dest.XXXXXX")
  printf '%s\n' "$3" > "$tmp"
  if [[ -f $dest ]] && cmp -s "$tmp" "$dest"; then rm -f "$tmp"; return 0; fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
  say "wrote $dest"
}
# install_so SRC DEST: install a built plugin (install, not cp: never write into a loaded .so).
install_so() {
  [[ -f $1 ]] || die "$1: no such file"
  if [[ -f $2 ]] && cmp -s "$1" "$2"; then return 0; fi
  install -m 755 "$1" "$2"
  say "installed $1 -> $2"
}
mkdir -p "$SLURM_ETC/plugstack.conf.d"

slurm_conf=$(render "$HERE/slurm.conf.in")

# ===== HOOK: gputokens plugins ====================================================================
# Default: no plugin lines. JOBSUBMIT_PLUGIN_SO / SPANK_PLUGIN_SO point at built plugins to load;
# GPUTOKENS_PLUGINS=installed loads the ones the gputokens-slurm-plugins package installed.
plugin_lines=""
spank_conf="$SLURM_ETC/plugstack.conf.d/gputokens.conf"
# use_installed_plugins: check the package's plugins are in PluginDir as it installed them, load the
# job_submit plugin, and give the SPANK plugin SPANK_PLUGIN_ARGS in the package's conffile, as an
# admin edits it (its comments and plugin path stay).
use_installed_plugins() {
  local package=gputokens-slurm-plugins so changed
  [[ -z ${JOBSUBMIT_PLUGIN_SO:-}${SPANK_PLUGIN_SO:-} ]] \
    || die "GPUTOKENS_PLUGINS=installed loads the packaged plugins: unset JOBSUBMIT_PLUGIN_SO and SPANK_PLUGIN_SO"
  for so in job_submit_gputokens.so spank_gputokens.so; do
    [[ $(dpkg-query -S "$PLUGIN_DIR/$so" 2>/dev/null) == "$package: $PLUGIN_DIR/$so" ]] \
      || die "$PLUGIN_DIR/$so is not from $package: install it (packaging/build-debs.sh, dpkg -i)"
  done
  # dpkg --verify names every file that differs from the package ('c': a conffile, edited on purpose).
  changed=$(dpkg --verify "$package" | awk '$2 != "c"') || true
  [[ -z $changed ]] || die "$package's files differ from the package (a build installed over them?): $changed"
  [[ -f $spank_conf ]] || die "$spank_conf missing: reinstall $package (dpkg -i --force-confmiss)"
  put "$spank_conf" 644 "$(awk '$1 ~ /^(optional|required)$/ && $2 ~ /\/spank_gputokens\.so$/ {
      $0 = $1 " " $2 (ENVIRON["SPANK_PLUGIN_ARGS"] == "" ? "" : " " ENVIRON["SPANK_PLUGIN_ARGS"]) } { print }' "$spank_conf")"
  grep -Eq "^(optional|required) $PLUGIN_DIR/spank_gputokens\.so( |$)" "$spank_conf" \
    || die "$spank_conf loads no $PLUGIN_DIR/spank_gputokens.so"
  plugin_lines="JobSubmitPlugins=gputokens"
}
# use_built_plugins: install JOBSUBMIT_PLUGIN_SO / SPANK_PLUGIN_SO (developers' builds) and load them.
use_built_plugins() {
  if [[ -n ${JOBSUBMIT_PLUGIN_SO:-} ]]; then
    install_so "$JOBSUBMIT_PLUGIN_SO" "$PLUGIN_DIR/job_submit_gputokens.so"
    plugin_lines="JobSubmitPlugins=gputokens"
  fi
  if [[ -n ${SPANK_PLUGIN_SO:-} ]]; then
    install_so "$SPANK_PLUGIN_SO" "$PLUGIN_DIR/spank_gputokens.so"
    put "$spank_conf" 644 "optional $PLUGIN_DIR/spank_gputokens.so${SPANK_PLUGIN_ARGS:+ $SPANK_PLUGIN_ARGS}"
  elif [[ -e $spank_conf ]]; then
    rm -f "$spank_conf"
    say "removed $spank_conf"
  fi
}
case ${GPUTOKENS_PLUGINS:-} in
  installed) use_installed_plugins ;;
  "") use_built_plugins ;;
  *) die "GPUTOKENS_PLUGINS='$GPUTOKENS_PLUGINS': the only mode is 'installed'" ;;
esac
# ===== end HOOK ===================================================================================

if [[ -n $plugin_lines ]]; then
  slurm_conf+=$'\n# --- plugins (up.sh hook) ---\n'"$plugin_lines"
fi
extra=${GPUTOKENS_EXTRA_SLURM_CONF:-}
if [[ -n $extra ]]; then
  # Key=value lines in the extra text replace the same key above (node/partition lines are additive).
  keys=$(printf '%s\n' "$extra" | sed -n 's/^[[:space:]]*\([A-Za-z]\+\)=.*/\1/p' \
         | grep -viE '^(NodeName|PartitionName|NodeSet|DownNodes)$' | tr 'A-Z\n' 'a-z ' || true)
  slurm_conf=$(printf '%s\n' "$slurm_conf" | awk -v keys="$keys" '
    BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) drop[k[i]] = 1 }
    match($0, /^[A-Za-z]+=/) && (tolower(substr($0, 1, RLENGTH - 1)) in drop) { print "#(replaced below) " $0; next }
    { print }')
  slurm_conf+=$'\n# --- GPUTOKENS_EXTRA_SLURM_CONF ---\n'"$extra"
fi
if [[ ${GPUTOKENS_CGROUP:-} == v2 ]]; then
  [[ $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]] \
    || die "GPUTOKENS_CGROUP=v2 but /sys/fs/cgroup is no cgroup2 mount (tests/slurm-releases/enter.sh makes one)"
  slurm_conf=$(sed 's|^ProctrackType=.*|ProctrackType=proctrack/cgroup|' <<<"$slurm_conf")
  put "$SLURM_ETC/cgroup.conf" 644 "# cgroup.conf — written by tests/cluster/up.sh (GPUTOKENS_CGROUP=v2)
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
${GPUTOKENS_CGROUP_CONF:-}"
else
  rm -f "$SLURM_ETC/cgroup.conf"
fi
put "$SLURM_ETC/slurm.conf" 644 "$slurm_conf"
put "$SLURM_ETC/gres.conf" 644 "$(render "$HERE/gres.conf.in")"
put "$SLURM_ETC/plugstack.conf" 644 "$(<"$HERE/plugstack.conf")"
put "$SLURM_ETC/slurmdbd.conf" 600 "$(render "$HERE/slurmdbd.conf.in")"
chown "$SLURM_USER:" "$SLURM_ETC/slurmdbd.conf"     # slurmdbd refuses a config its SlurmUser does not own

# A fresh cgroup for slurmd to start in, as systemd gives it slurmd.service. Slurm's cgroup/v2 without
# systemd places its stepd scope beside the cgroup of PID 1, and, in a cgroup namespace like
# enter.sh's (whose root is not the machine's), first moves every process of the cgroup slurmd starts
# in into a child of it: started from this script's cgroup, slurmd would move PID 1 one level down on
# each start, and the jobs of a restarted slurmd would land under /init.scope/... (seen on 24.11 when
# a first start lost its race and slurmd was started again).
slurmd_own_cgroup() {
  local cg=/sys/fs/cgroup/slurmd.service old
  # What earlier starts left: empty once slurmd moved on to its stepd scope.
  for old in "$cg" "$cg".*; do
    [[ -d $old ]] || continue
    find "$old" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
    rmdir "$old" 2>/dev/null || true
  done
  [[ -d $cg ]] && cg=$cg.$$.$RANDOM
  mkdir "$cg" && echo "$cg"
}

# fingerprint FILES...: hash of what a daemon loads; a running daemon started with another one restarts.
fingerprint() {
  local f
  for f in "$@"; do if [[ -e $f ]]; then sha256sum "$f"; fi; done | sha256sum | cut -c1-16
}
shopt -s nullglob
FP_slurmdbd=$(fingerprint "$SLURM_ETC/slurmdbd.conf")
FP_slurmctld=$(fingerprint "$SLURM_ETC/slurm.conf" "$SLURM_ETC/gres.conf" "$PLUGIN_DIR/job_submit_gputokens.so")
FP_slurmd=$(fingerprint "$SLURM_ETC/slurm.conf" "$SLURM_ETC/gres.conf" "$SLURM_ETC/cgroup.conf" "$SLURM_ETC/plugstack.conf" \
            "$SLURM_ETC"/plugstack.conf.d/* "$PLUGIN_DIR/spank_gputokens.so")
shopt -u nullglob

# ---- Slurm daemons: started without -D, they daemonize and write $LAB/run/NAME.pid themselves -----
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ensure_slurm_daemon NAME PORT READY_TIMEOUT READY-CMD...
# Sets STARTED=1 when it (re)started NAME; FORCE_RESTART=1 restarts a running one (reason FORCE_REASON).
FORCE_RESTART=0 FORCE_REASON="" STARTED=0
ensure_slurm_daemon() {
  STARTED=0
  local name=$1 port=$2 timeout=$3; shift 3
  local own="$LAB/run/$name.pid" applied="$LAB/run/$name.applied" fpvar="FP_$name" p="" q
  local fp=${!fpvar}
  if ! p=$(our_pid "$name" "$name"); then
    p=""
    q=$(cat "$own" 2>/dev/null || true)
    if proc_is "$q" "$name"; then                  # this lab's daemon, but its pids/ entry was lost
      echo "$q" > "$LAB/pids/$name.pid"; p=$q
      say "$name: adopted pid $q from $own"
    fi
  fi
  if [[ -n $p ]]; then
    if [[ $(cat "$applied" 2>/dev/null || true) != "$fp" ]]; then
      say "$name (pid $p): config or plugin changed since it started, restarting"
      stop_daemon "$name" "$name"
    elif [[ $FORCE_RESTART == 1 ]]; then
      say "$name (pid $p): restarting ($FORCE_REASON)"
      stop_daemon "$name" "$name"
    elif waitfor "$timeout" "$@"; then
      say "$name already running (pid $p)"
      return 0
    else
      say "$name (pid $p) is running but not answering, restarting"
      stop_daemon "$name" "$name"
    fi
  else
    if [[ -e $LAB/pids/$name.pid ]]; then
      say "$name: stale pidfile ($(<"$LAB/pids/$name.pid")), starting a new one"
      rm -f "$LAB/pids/$name.pid"
    fi
    if port_open "$port"; then
      say "WARNING: port $port is taken by a $name not started by up.sh; using it (config changes not applied)"
      return 0
    fi
  fi
  rm -f "$own"
  START_TIME=$(date +%Y-%m-%dT%H:%M:%S)
  local attempt launch cg
  for attempt in 1 2; do
    launch=()
    if [[ $name == slurmd && ${GPUTOKENS_CGROUP:-} == v2 ]]; then
      cg=$(slurmd_own_cgroup) || die "no cgroup could be made for slurmd under /sys/fs/cgroup"
      # shellcheck disable=SC2016
      launch=(bash -c 'echo $$ > "$1/cgroup.procs" && exec "${@:2}"' _ "$cg")
      [[ -n ${GPUTOKENS_CGROUP_SHIM:-} ]] && launch+=(env "LD_PRELOAD=$GPUTOKENS_CGROUP_SHIM")
    fi
    bounded "$T_CALL" "${launch[@]}" "/usr/sbin/$name" </dev/null >>"$LAB/log/$name.stdout" 2>&1 \
      || die "$name failed to start; tail of $LAB/log/$name.log:
$(tail -n 20 "$LAB/log/$name.log" "$LAB/log/$name.stdout" 2>/dev/null)"
    if waitfor 10 test -s "$own"; then break; fi
    # slurmd on cgroup/v2 first moves every process out of the cgroup it started in; one that exits
    # meanwhile fails that ("No such process"): a race, so it is started once more. (Alone in its
    # cgroup it should no longer lose it; it did while it started in this script's.)
    if (( attempt == 1 )) && [[ $name == slurmd ]] \
      && tail -n 20 "$LAB/log/$name.log" 2>/dev/null | grep -q 'cannot empty the false root cgroup'; then
      say "slurmd lost a race moving processes out of its cgroup: starting it again"
      continue
    fi
    die "$name wrote no $own"
  done
  p=$(<"$own")
  echo "$p" > "$LAB/pids/$name.pid"
  echo "$fp" > "$applied"
  local ready=0 why="not ready after ${timeout}s" end=$(( $(now_ms) + timeout * 1000 ))
  while :; do
    if "$@" >/dev/null 2>&1; then ready=1; break; fi
    if ! proc_is "$p" "$name"; then why="exited"; break; fi
    (( $(now_ms) < end )) || break
    sleep 0.1
  done
  (( ready )) || die "$name (pid $p) $why; tail of $LAB/log/$name.log:
$(tail -n 15 "$LAB/log/$name.log" 2>/dev/null)"
  say "started $name (pid $p)"
  STARTED=1
}

# ---- MariaDB + slurmdbd --------------------------------------------------------------------------
if p=$(our_pid mariadbd mariadbd); then
  say "mariadbd already running (pid $p)"
else
  rm -f "$LAB/pids/mariadbd.pid"
  if mariadb_ok; then
    say "mariadbd: one not started by up.sh answers; using it (down.sh leaves it alone)"
  else
    start_mariadb
    say "started mariadbd (pid $(<"$LAB/pids/mariadbd.pid"))"
  fi
fi
bounded "$T_CALL" mariadb -e "CREATE DATABASE IF NOT EXISTS $DBNAME;
  CREATE USER IF NOT EXISTS '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
  ALTER USER '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
  GRANT ALL ON $DBNAME.* TO '$DBUSER'@'localhost';" \
  || die "mariadb did not create the accounting database; tail of $LAB/log/mariadbd.log:
$(tail -n 15 "$LAB/log/mariadbd.log" 2>/dev/null)"

dbd_ok() { timeout -k 2 "$T_PROBE" sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; }
ensure_slurm_daemon slurmdbd 6819 30 dbd_ok

# associations: one listing, then only the additions that are missing
assoc=$(bounded "$T_CALL" sacctmgr -n -P list assoc format=cluster,account,user) || die "sacctmgr list assoc failed"
if ! grep -q "^$CLUSTER|" <<<"$assoc"; then
  bounded "$T_CALL" sacctmgr -i add cluster "$CLUSTER" >/dev/null
  say "sacctmgr: added cluster $CLUSTER"
fi
if ! grep -qx "$CLUSTER|$ACCOUNT|" <<<"$assoc"; then
  bounded "$T_CALL" sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" Description="gputokens tests" Organization=gputokens >/dev/null
  say "sacctmgr: added account $ACCOUNT"
fi
declare -A in_account=()
while IFS='|' read -r c a u; do
  if [[ $c == "$CLUSTER" && $a == "$ACCOUNT" && -n $u ]]; then in_account[$u]=1; fi
done <<<"$assoc"
missing=()
for u in root "${TEST_USERS[@]}" "${SET_USERS[@]}"; do
  [[ -n ${in_account[$u]:-} ]] || missing+=("$u")
done
if (( ${#missing[@]} )); then
  bounded "$T_CALL" sacctmgr -i add user "$(IFS=,; echo "${missing[*]}")" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null \
    || die "sacctmgr did not add users ${missing[*]} to account $ACCOUNT"
  say "sacctmgr: added users $(some_of "${missing[@]}") to account $ACCOUNT"
fi

# QOS: normal weighs 10 (the test cluster's PriorityWeightQOS makes that +10000); gputokens-overdraft,
# where the job_submit plugin can move GPU jobs in overdraft, weighs 0. Every test user may use it.
qos=$(bounded "$T_CALL" sacctmgr -n -P list qos format=name,priority) || die "sacctmgr list qos failed"
if ! grep -qx "gputokens-overdraft|0" <<<"$qos"; then
  bounded "$T_CALL" sacctmgr -i add qos gputokens-overdraft Priority=0 >/dev/null
  say "sacctmgr: added qos gputokens-overdraft"
fi
if ! grep -qx "normal|10" <<<"$qos"; then
  bounded "$T_CALL" sacctmgr -i modify qos normal set Priority=10 >/dev/null
  say "sacctmgr: qos normal Priority=10"
fi
if ! bounded "$T_CALL" sacctmgr -n -P list assoc account="$ACCOUNT" format=qos | grep -q gputokens-overdraft; then
  bounded "$T_CALL" sacctmgr -i modify account "$ACCOUNT" set qos+=gputokens-overdraft >/dev/null
  say "sacctmgr: account $ACCOUNT may use qos gputokens-overdraft"
fi

# ---- slurmctld + slurmd --------------------------------------------------------------------------
ctld_ok() { timeout -k 2 "$T_PROBE" scontrol ping 2>/dev/null | grep -q 'is UP'; }
ensure_slurm_daemon slurmctld 6817 30 ctld_ok
# A fresh slurmctld shows the node UNKNOWN until its next ping of slurmd (~5 s); a restarted slurmd
# registers at once (~0.2 s), so restart ours along with slurmctld.
if [[ $STARTED == 1 ]]; then FORCE_RESTART=1 FORCE_REASON="slurmctld was restarted"; fi

# slurmd is ready once the node has registered (since START_TIME when it was just started)
START_TIME=""
slurmd_ok() {
  local info st t
  info=$(timeout -k 2 "$T_PROBE" scontrol -o show node "$HOST" 2>/dev/null) || return 1
  st=$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$info")
  t=$(sed -n 's/.* SlurmdStartTime=\([^ ]*\).*/\1/p' <<<"$info")
  [[ -n $st && $st != *NOT_RESPONDING* && $st != UNKNOWN* ]] || return 1
  [[ -z $START_TIME || ( $t != None && ! $t < $START_TIME ) ]]
}
ensure_slurm_daemon slurmd 6818 30 slurmd_ok

# ---- node must be idle with the expected GPUs ----------------------------------------------------
want_gres="gpu:rtx2080:4,gpu:rtx3090:2,gpu:a6000:2,gpu:a100_3g.20gb:2"
node_line() { timeout -k 2 "$T_PROBE" sinfo -h -n "$HOST" -o '%T|%G|%E'; }
# planned: idle, with the backfill scheduler planning a pending job on it (Slurm 23.02+); not a
# state `scontrol update state=resume` leaves.
node_usable() { [[ $(node_line | cut -d'|' -f1) =~ ^(idle|mixed|allocated|completing|planned)$ ]]; }
if ! node_usable; then
  say "node $HOST is '$(node_line)', resuming"
  bounded "$T_CALL" scontrol update nodename="$HOST" state=resume || true
  waitfor 15 node_usable || die "node $HOST did not become usable: $(node_line); see $LAB/log/slurmd.log"
fi
IFS='|' read -r state gres _ <<<"$(node_line)"
gres=$(sed 's/([^)]*)//g' <<<"$gres")
[[ $gres == "$want_gres" ]] || die "node $HOST has gres '$gres', expected '$want_gres'"
say "node $HOST $state, gres $gres"
say "cluster up (LAB=$LAB, partition gpu, account $ACCOUNT: root ${TEST_USERS[*]} and $TEST_USER_SETS sets of them) in $(elapsed)s"
