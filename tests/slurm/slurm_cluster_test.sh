#!/usr/bin/env bash
# evalrun on a real single-node Slurm cluster that this test starts itself: slurmctld + slurmd with a
# config of their own in a temporary directory (AuthType=auth/none, no systemd, no munge), then
#  1. slurm/evalrun.sbatch with 2 tasks (srun --mpi=pmix), output path with %j;
#  2. `evalrun submit` of a 2-run batch that passes and of one that fails (job array + dependent compare
#     job whose exit status is the verdict).
# Checks the HDF5 files, the summaries and the compare jobs' exit codes, then stops the daemons.
# Usage: tests/slurm/slurm_cluster_test.sh EVALRUN_BIN   (run from the repository root)
set -euo pipefail
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
for cmd in slurmctld slurmd sbatch squeue scontrol; do
  command -v "$cmd" >/dev/null || { echo "FAIL: $cmd not found (scripts/setup.sh installs slurm-wlm)"; exit 1; }
done

tmp=$(mktemp -d /tmp/evalrun-slurm-XXXXXX)
export SLURM_CONF=$tmp/slurm.conf
cleanup() {
  for d in slurmd slurmctld; do
    [ -f "$tmp/$d.pid" ] && kill "$(cat "$tmp/$d.pid")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log "$tmp"/logs/*; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

# Ports of our own (another cluster or test may hold the defaults).
port=$((20000 + RANDOM % 20000))
host=$(hostname)
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/logs" "$tmp/out"
cat > "$SLURM_CONF" <<CONF
ClusterName=evalrun-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=$(id -un)
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for i in $(seq 1 30); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ] && break
  sleep 1
done
[ "$(sinfo -h -o %t)" = "idle" ] || fail "the node did not become idle: $(sinfo 2>&1)"
echo "slurm: cluster up on $host:$port"

# A tiny QA model and its config; a reference run for the batches.
"$bin" make-model --head qa --preset tiny --seed 7 --out "$tmp/qa" >/dev/null
cat > "$tmp/qa.toml" <<TOML
[run]
name = "qa"
[model]
path = "$tmp/qa"
[task]
kind = "qa"
dataset = "$root/data/demo_squad.json"
max_seq_length = 128
doc_stride = 32
TOML
"$bin" "$tmp/qa.toml" --set "output.path=$tmp/ref.h5" >/dev/null 2>&1 || fail "reference run failed"
printf '[qa]\nmax_logit_diff = 0.0\nmean_logit_diff = 0.0\n' > "$tmp/strict.toml"
cat > "$tmp/pass.toml" <<TOML
[batch]
name = "pass"
ranks = 2
[[run]]
config = "$tmp/qa.toml"
set = ["task.batch_size=1"]
reference = "$tmp/ref.h5"
[[run]]
config = "$tmp/qa.toml"
set = ["task.batch_size=5"]
reference = "$tmp/ref.h5"
TOML
cat > "$tmp/fail.toml" <<TOML
[batch]
name = "fail"
ranks = 2
[[run]]
config = "$tmp/qa.toml"
reference = "$tmp/ref.h5"
[[run]]
name = "bf16-strict"
config = "$tmp/qa.toml"
set = ["model.dtype=bf16"]
reference = "$tmp/ref.h5"
thresholds = "$tmp/strict.toml"
TOML

# 1. one run with 2 tasks through the sbatch template
export EVALRUN_BIN=$bin
single=$(sbatch --parsable --ntasks=2 --output="$tmp/logs/single-%j.out" slurm/evalrun.sbatch "$tmp/qa.toml" \
  --set "output.path=$tmp/out/%j/qa.h5")
# 2. two batches as job arrays with a dependent compare job each
"$bin" submit "$tmp/pass.toml" --dir "$tmp/pass" --time 00:10:00 | tee "$tmp/submit-pass.txt"
"$bin" submit "$tmp/fail.toml" --dir "$tmp/fail" --time 00:10:00 | tee "$tmp/submit-fail.txt"
compare_pass=$(sed -n 's/.*compare job \([0-9]*\).*/\1/p' "$tmp/submit-pass.txt")
compare_fail=$(sed -n 's/.*compare job \([0-9]*\).*/\1/p' "$tmp/submit-fail.txt")
[ -n "$compare_pass" ] && [ -n "$compare_fail" ] || fail "evalrun submit printed no job ids"

# Bounded: 5 minutes, times the factor a sanitizer build sets (tests/CMakeLists.txt).
minutes=$((5 * ${EVALRUN_TEST_TIMEOUT_FACTOR:-1}))
for i in $(seq 1 $((minutes * 30))); do
  [ -z "$(squeue -h 2>/dev/null)" ] && break
  sleep 2
done
[ -z "$(squeue -h)" ] || fail "jobs still queued after $minutes minutes: $(squeue)"

exit_code() { scontrol show job "$1" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p'; }
# 1: the 2-task run wrote its file under the job id, from 2 ranks
[ -f "$tmp/out/$single/qa.h5" ] || fail "single run: no $tmp/out/$single/qa.h5"
"$bin" inspect "$tmp/out/$single/qa.h5" | grep -Eq "world_size +2$" || fail "single run: not 2 ranks: $("$bin" inspect "$tmp/out/$single/qa.h5" | head -20)"
grep -q "2 task(s)" "$tmp"/logs/single-"$single".out || fail "single run: log does not show 2 tasks"
[ "$(exit_code "$single")" = 0 ] || fail "single run: exit code $(exit_code "$single")"
# 2: passing batch
for n in 1 2; do [ -f "$tmp/pass/results/run$n.h5" ] || fail "pass batch: no run$n.h5"; done
grep -q "RESULT: PASS" "$tmp/pass/summary.md" || fail "pass batch: $(cat "$tmp/pass/summary.md")"
ls "$tmp"/pass/reports/01-*.html >/dev/null || fail "pass batch: no HTML report"
[ "$(exit_code "$compare_pass")" = 0 ] || fail "pass batch: compare job exit $(exit_code "$compare_pass")"
# 2: failing batch: the bf16 run fails the strict limits, the verdict is the compare job's exit code 1
grep -q "RESULT: FAIL (bf16-strict)" "$tmp/fail/summary.md" || fail "fail batch: $(cat "$tmp/fail/summary.md")"
grep -q "max_logit_diff" "$tmp/fail/summary.md" || fail "fail batch: the failing metric is not named"
[ "$(exit_code "$compare_fail")" = 1 ] || fail "fail batch: compare job exit $(exit_code "$compare_fail"), expected 1"
echo "PASS: single 2-task run (job $single), passing batch (compare job $compare_pass), failing batch (compare job $compare_fail, exit 1)"
