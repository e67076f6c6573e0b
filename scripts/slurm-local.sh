#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the cluster tests (make test-slurm) and for trying
# `cgbench sweep --executor slurm` without a real cluster. Debian/Ubuntu, run as root, no
# systemd needed: every daemon runs in the foreground (-D / -F) as a background child of this script,
# and its PID is recorded so `stop` ends exactly the processes `start` began.
#
#   bash scripts/slurm-local.sh start   install what is missing (apt-get --no-install-recommends), write the
#                                       config, start munged, MariaDB, slurmdbd, slurmctld and slurmd, wait for
#                                       the node to be idle, register the cluster in accounting
#   bash scripts/slurm-local.sh check   srun, a 4-task array, sacct, scancel (exit 1 when one fails)
#   bash scripts/slurm-local.sh stop    cancel the cluster's jobs, stop the daemons it started, keep the logs
#   bash scripts/slurm-local.sh status  exit 0 when the cluster is up; prints the SLURM_CONF to export
#   bash scripts/slurm-local.sh env     prints `export SLURM_CONF=...` (eval "$(... env)")
#
# Accounting (slurmdbd + MariaDB) is not optional: without it sacct fails, submitit sees every job as
# UNKNOWN, and a cancelled job makes it wait forever.
#
# Environment:
#   CGBENCH_SLURM_DIR   state, config and logs (default: ${TMPDIR:-/tmp}/cgbench-slurm); the clients need
#                       SLURM_CONF=$CGBENCH_SLURM_DIR/etc/slurm.conf (see `env`)
#   CGBENCH_SLURM_PORT  first of four TCP ports on 127.0.0.1: slurmctld, slurmd, slurmdbd, MariaDB
#                       (default 16817)
#   CGBENCH_SLURM_MAX_ARRAY_SIZE  the cluster's MaxArraySize (default 50, SLURM's own default is 1001):
#                       low, so that a sweep of a few thousand points needs several job arrays and
#                       the splitting at the limit is exercised (tests/analysis/test_slurm.py)
#
# Exit codes of start: 0 up (or already up), 3 SLURM cannot be provided here (not root, no apt-get, the
# packages do not install), 1 a daemon did not come up (its log is printed). Either way the reason is
# written to $CGBENCH_SLURM_DIR/unavailable, where the cluster tests read it for their skip message.
#
# Timings on a 2-core Debian 12 VM shared with other work: start from nothing 40 s (apt-get 28 s, the
# daemons 12 s), start with the packages installed 4 s, check 4 s, stop 10 s (MariaDB and slurmdbd
# shut down cleanly).
set -uo pipefail

STATE=${CGBENCH_SLURM_DIR:-${TMPDIR:-/tmp}/cgbench-slurm}
PORT0=${CGBENCH_SLURM_PORT:-16817}
MAX_ARRAY_SIZE=${CGBENCH_SLURM_MAX_ARRAY_SIZE:-50}
CTLD_PORT=$PORT0 SLURMD_PORT=$((PORT0 + 1)) DBD_PORT=$((PORT0 + 2)) DB_PORT=$((PORT0 + 3))
CLUSTER=cgbench
PARTITION=debug
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)  # start order; stop goes the other way
export SLURM_CONF=$STATE/etc/slurm.conf

say() { printf 'slurm-local: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

unavailable() {  # the reason SLURM cannot run here; the tests skip with it
    mkdir -p "$STATE" && printf '%s\n' "$*" > "$STATE/unavailable"
    say "unavailable: $*"
    exit 3
}

pid_of() { cat "$STATE/pids/$1.pid" 2>/dev/null; }
alive() { local pid; pid=$(pid_of "$1") && [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.2 s
    local limit=$1 what=$2; shift 2
    local deadline=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        if (( $(date +%s) >= deadline )); then say "timed out after ${limit}s waiting for $what"; return 1; fi
        sleep 0.2
    done
}

# ------------------------------------------------------------------------------------------- install

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    (( ${#missing[@]} == 0 )) && return 0
    command -v apt-get >/dev/null || unavailable "no apt-get to install ${missing[*]}"
    local t0 added_policy=0
    t0=$(now)
    # the packages' scripts must not start the services (there is no init system to stop them again)
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && added_policy=1
    fi
    say "installing ${missing[*]}"
    local log=$STATE/log/apt.log ok=0
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
        ok=1
    elif apt-get update -q >>"$log" 2>&1 &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
        ok=1
    fi
    (( added_policy )) && rm -f /usr/sbin/policy-rc.d
    (( ok )) || unavailable "apt-get could not install ${missing[*]} ($(tail -n 1 "$log"))"
    say "installed in $(since "$t0") s"
}

# ------------------------------------------------------------------------------------------- config

write_config() {
    local node host
    host=$(hostname -s)
    # the node exactly as slurmd sees it, reachable on loopback
    node=$(slurmd -C 2>/dev/null | head -n 1)
    [[ $node == NodeName=* ]] || { say "slurmd -C printed no node line"; return 1; }
    node=$(sed -E 's/ RealMemory=[0-9]+//' <<<"$node")  # CR_Core: memory is not a consumable here
    cat > "$STATE/etc/slurm.conf" <<EOF
# written by scripts/slurm-local.sh: a single-node cluster without cgroups
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
KillWait=5
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MaxArraySize=$MAX_ARRAY_SIZE
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$STATE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=cgbench-local
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$STATE/etc/slurmdbd.conf"
}

# ------------------------------------------------------------------------------------------- daemons

spawn() {  # spawn NAME COMMAND...: background, own session (a Ctrl-C of the caller does not reach it)
    local name=$1; shift
    setsid "$@" >"$STATE/log/$name.out" 2>&1 </dev/null &
    echo $! > "$STATE/pids/$name.pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
sql() { mariadb --no-defaults -S "$STATE/db/mysqld.sock" -u root -e "$1"; }
node_idle() { [[ $(sinfo -h -N -o %T 2>/dev/null) == idle ]]; }

fail() {  # fail DAEMON: print its log tail and stop what was started
    printf '%s did not come up (logs in %s)\n' "$1" "$STATE/log" > "$STATE/unavailable"
    say "$1 did not come up; last lines of its log:"
    tail -n 15 "$STATE/log/$1.log" "$STATE/log/$1.out" 2>/dev/null >&2
    do_stop
    exit 1
}

munge_ok() { munge -n | unmunge; }

start_munge() {
    # slurm's clients (sacctmgr among them) talk to munged on its default socket, so that one is used
    if munge_ok >/dev/null 2>&1; then say "munged already answers on /run/munge: using it"; return 0; fi
    mkdir -p "$STATE/munge" /run/munge
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chown -R munge:munge "$STATE/munge" /run/munge && chmod 700 "$STATE/munge" && chmod 400 "$STATE/munge/munge.key"
    # foreground: a forking munged is left a zombie where PID 1 does not reap
    spawn munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F \
        --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
        --seed-file="$STATE/munge/munged.seed" --log-file="$STATE/munge/munged.log"
    wait_for 10 munged munge_ok || { cp "$STATE/munge/munged.log" "$STATE/log/munged.log" 2>/dev/null; fail munged; }
}

start_mariadb() {
    mkdir -p "$STATE/db"
    chown mysql:mysql "$STATE/db"
    mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/db/data" --auth-root-authentication-method=socket \
        --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 || fail mariadb-install
    spawn mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$STATE/db/data" \
        --socket="$STATE/db/mysqld.sock" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --pid-file="$STATE/db/mariadbd.pid" --log-error="$STATE/log/mariadbd.log" \
        --innodb-buffer-pool-size=32M --skip-name-resolve
    wait_for 30 MariaDB sql "SELECT 1" || fail mariadbd
    sql "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'cgbench-local';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || fail mariadbd
}

do_start() {
    if alive slurmctld && node_idle; then say "already up (SLURM_CONF=$SLURM_CONF)"; return 0; fi
    [[ $(id -u) == 0 ]] || unavailable "needs root (daemons, packages); running as $(id -un)"
    local t0 p
    t0=$(now)
    mkdir -p "$STATE/log"
    install_packages
    if alive munged || alive slurmd; then do_stop; fi  # a half-started cluster: begin again
    for p in $CTLD_PORT $SLURMD_PORT $DBD_PORT $DB_PORT; do
        port_open "$p" && unavailable "port $p on 127.0.0.1 is taken (set CGBENCH_SLURM_PORT)"
    done
    rm -rf "$STATE"/{etc,run,pids,ctld,slurmd,db,munge,unavailable}
    mkdir -p "$STATE"/{etc,run,pids,ctld,slurmd,log}
    write_config || fail slurmd
    t1=$(now)
    start_munge
    start_mariadb
    spawn slurmdbd /usr/sbin/slurmdbd -D
    wait_for 30 slurmdbd port_open "$DBD_PORT" || fail slurmdbd
    sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>"$STATE/log/sacctmgr.log" || fail sacctmgr
    spawn slurmctld /usr/sbin/slurmctld -D -i
    wait_for 30 slurmctld scontrol ping || fail slurmctld
    spawn slurmd /usr/sbin/slurmd -D
    wait_for 30 "the node to be idle" node_idle || fail slurmd
    say "up in $(since "$t0") s (daemons $(since "$t1") s); export SLURM_CONF=$SLURM_CONF"
}

do_stop() {
    local t0 name pid i
    t0=$(now)
    if alive slurmctld; then  # the cluster's jobs first: slurmd leaves running job steps behind otherwise
        scancel --partition="$PARTITION" >/dev/null 2>&1
        wait_for 20 "the jobs to end" bash -c '[[ -z $(squeue -h -o %i 2>/dev/null) ]]'
    fi
    for (( i = ${#DAEMONS[@]} - 1; i >= 0; i-- )); do
        name=${DAEMONS[i]}
        pid=$(pid_of "$name") || continue
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            wait_for 15 "$name to exit" bash -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null
        fi
        rm -f "$STATE/pids/$name.pid"
    done
    say "stopped in $(since "$t0") s (logs in $STATE/log)"
}

# ------------------------------------------------------------------------------------------- check

do_check() {
    local t0 out job states
    t0=$(now)
    alive slurmctld || { say "not running (bash scripts/slurm-local.sh start)"; return 1; }
    out=$(srun -N1 -n1 -t 1 hostname 2>&1) || { say "srun failed: $out"; return 1; }
    say "srun: ran on $out"
    job=$(sbatch --parsable -t 1 --array=0-3 -o /dev/null --wrap 'echo $SLURM_ARRAY_TASK_ID') ||
        { say "sbatch --array failed"; return 1; }
    wait_for 30 "array $job to finish" bash -c "[[ -z \$(squeue -h -j $job -o %i 2>/dev/null) ]]" || return 1
    wait_for 15 "sacct to record array $job" bash -c \
        "[[ \$(sacct -n -X -P -j $job -o State | grep -c COMPLETED) == 4 ]]" ||
        { say "sacct: $(sacct -n -X -P -j "$job" -o JobID,State 2>&1 | tr '\n' ' ')"; return 1; }
    say "array $job: 4 tasks COMPLETED in sacct"
    job=$(sbatch --parsable -t 1 -o /dev/null --wrap 'sleep 60') || { say "sbatch failed"; return 1; }
    wait_for 15 "job $job to start" bash -c "[[ \$(squeue -h -j $job -o %T) == RUNNING ]]" || return 1
    scancel "$job"
    wait_for 20 "sacct to record job $job as CANCELLED" bash -c \
        "sacct -n -X -P -j $job -o State | grep -q CANCELLED" || return 1
    states=$(sacct -n -X -P -j "$job" -o State | head -n 1)
    say "scancel: job $job is $states in sacct"
    say "check passed in $(since "$t0") s"
}

case ${1:-} in
    start) do_start ;;
    stop) do_stop ;;
    check) do_check ;;
    status) alive slurmctld && node_idle && echo "SLURM_CONF=$SLURM_CONF" ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
