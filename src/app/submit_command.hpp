// `evalrun submit JOBS.toml`: a Slurm job array over the runs of a batch (one array task per run) and a
// dependent job that compares every result with its reference; prints the job ids (--dry-run: the
// scripts and the sbatch commands instead).
#pragma once

namespace evalrun {

int submit_command(int argc, char** argv);

}  // namespace evalrun
