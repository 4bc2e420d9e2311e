//! `tickswarm validate SCENARIO`: the plan a run would follow, printed without running it,
//! with what the run will need (open files) and which thresholds it cannot measure.
//!
//! Exit codes: 0 the scenario is valid, 2 it is not (or no run could open its sockets).

use std::path::PathBuf;

use super::{
    load_plan, send_path, unmeasurable_thresholds, OutDirArg, OverrideArgs, EXIT_PASS, EXIT_USAGE,
};
use crate::engine;
use crate::scenario;

#[derive(clap::Args, Debug)]
pub(crate) struct ValidateArgs {
    /// Scenario YAML file.
    #[arg(env = "TICKSWARM_SCENARIO")]
    scenario: PathBuf,
    #[command(flatten)]
    ov: OverrideArgs,
    /// Refused with why: `validate` writes nothing, and clap's own "unexpected argument"
    /// suggested `--bots` for it. (TICKSWARM_OUT is not read: CI sets it for every step.)
    #[arg(long, hide = true, value_name = "DIR", value_parser = no_out_for_validate)]
    out: Option<String>,
}

fn no_out_for_validate(_: &str) -> Result<String, String> {
    Err(
        "validate writes no files, so it takes no --out; the output folder is an option of \
         `run` and `capacity`"
            .into(),
    )
}

pub(crate) fn cmd_validate(a: &ValidateArgs) -> anyhow::Result<u8> {
    let plan = match load_plan(&a.scenario, &a.ov, &OutDirArg::default()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    out_inline!("{}", plan.describe_with(send_path(&plan).as_deref()));
    // One socket per bot: say what the run will need, and refuse now what no run could open.
    if let Some((needed, soft, hard)) = engine::limits::fd_budget(plan.planned) {
        out!("files      about {needed} open files needed (limit {soft}, raised up to {hard} at start)");
        if needed > hard {
            say!(
                "error: {} bots need about {needed} open files (one socket each), above this \
                 process's hard limit of {hard}: raise it (`ulimit -Hn {needed}` as root, \
                 LimitNOFILE= in a systemd unit, --ulimit nofile= in a container) or run \
                 fewer bots per process (--shard)",
                plan.planned
            );
            return Ok(EXIT_USAGE);
        }
    }
    for (t, why) in unmeasurable_thresholds(&plan) {
        let then = match plan.unmeasurable {
            scenario::threshold::Unmeasurable::Fail => {
                "the run will FAIL it (unmeasurable_thresholds: skip leaves it out of the verdict)"
            }
            scenario::threshold::Unmeasurable::Skip => {
                "the run will skip it (unmeasurable_thresholds: skip)"
            }
        };
        say!(
            "warning: threshold `{}` cannot be measured with {} (dialect {}): {why}; {then}",
            t.text,
            plan.protocol.name(),
            plan.protocol.dialect_name()
        );
    }
    out!("ok: {} is valid", a.scenario.display());
    Ok(EXIT_PASS)
}
