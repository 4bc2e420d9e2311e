//! Ctrl-C and SIGTERM, for every command that runs until told to stop (`run`, `capacity`,
//! `serve`, `relay`): one thread with its own small runtime waits for them, so the command's
//! own loops never poll for signals.

use std::time::Duration;

/// Wait for Ctrl-C or SIGTERM on a thread of its own and call `first` with the signal's name
/// (`Ctrl-C`, `SIGTERM`) when one comes. With `exit_on_second`, a second one ends the process
/// at once (exit 130 for Ctrl-C, 143 for SIGTERM): the way out of a stop that hangs.
///
/// The handlers are in place when this returns, so a signal that comes right after the start
/// already finds them.
pub(crate) fn on_stop(first: impl FnOnce(&'static str) + Send + 'static, exit_on_second: bool) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("tickswarm-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    return;
                };
                let _ = ready_tx.send(());
                let name = tokio::select! {
                    _ = int.recv() => "Ctrl-C",
                    _ = term.recv() => "SIGTERM",
                };
                first(name);
                if exit_on_second {
                    let code = tokio::select! {
                        _ = int.recv() => 130,
                        _ = term.recv() => 143,
                    };
                    std::process::exit(code);
                }
            });
        });
    if spawned.is_ok() {
        // An error means the thread ended without handlers (no runtime): nothing to wait for.
        let _ = ready_rx.recv_timeout(Duration::from_secs(5));
    }
}

/// Ctrl-C or SIGTERM once: stop the swarm and still write the report. A second one: leave at
/// once (130 after Ctrl-C, 143 after SIGTERM, as a shell reports a death by that signal).
///
/// SIGTERM is what `docker stop`, Kubernetes and CI runners send before SIGKILL, so it must
/// stop as gracefully as Ctrl-C: without a handler it killed the run before the report was
/// written, and a process that is PID 1 in a container (this image's entrypoint) ignores it
/// altogether (the kernel gives PID 1 no default action), so it was killed 10 s later.
/// Ctrl-C or SIGTERM stops the run (its report is still written); a second one exits.
pub(crate) fn install_ctrl_c(stop: crate::engine::StopSignal) {
    on_stop(
        move |name| {
            say!("\nstopping ({name}): writing the report (again to abort)");
            stop.stop();
        },
        true,
    );
}
