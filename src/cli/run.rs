//! `tickswarm run`: one scenario from its plan to its verdict (the swarm, the live views,
//! the reports and the exit code), and the run facts `capacity` shares.

use std::time::Duration;

use anyhow::Context;

use super::*;

/// What this machine gives a raw-UDP swarm's sends (an io_uring ring is built and dropped
/// to know), for the plan's description; `None` for transports that send on their own.
pub(super) fn send_path(plan: &scenario::Plan) -> Option<String> {
    use engine::io::send_batch::{IoMode, SendPath};
    // Raw-UDP and ENet bots send through the worker's batch; GNS and the TCP-login
    // transport do their own I/O.
    matches!(
        plan.protocol.transport(),
        crate::protocol::TransportNeeds::Udp | crate::protocol::TransportNeeds::Enet(_)
    )
    .then(|| SendPath::probe(IoMode::from_env()).describe())
}

pub(super) fn cmd_run(a: &RunArgs, console: Console) -> anyhow::Result<u8> {
    let plan = match load_plan(&a.scenario, &a.ov, &a.out) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dir = plan.out_dir.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            sanitize(&plan.name),
            report::build::folder_stamp(std::time::SystemTime::now())
        ))
    });
    // Opened once, now: the files go into this folder however its path changes during the run.
    let run_dir = match report::RunDir::open(&dir, a.output.force) {
        Ok(d) => d,
        Err(e) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let stop = StopSignal::new();
    install_ctrl_c(stop.clone());
    // Said now, not after a long run: a threshold nothing can measure against this server.
    for (t, why) in unmeasurable_thresholds(&plan) {
        say!(
            "warning: threshold `{}` is not measurable with {} (dialect {}): {why}",
            t.text,
            plan.protocol.name(),
            plan.protocol.dialect_name()
        );
    }
    if !console.quiet {
        say!(
            "tickswarm: {} bots{}, {} over {}, target {}, {} for {}",
            plan.planned,
            plan.shard
                .map(|s| format!(" (shard {s})"))
                .unwrap_or_default(),
            plan.protocol.name(),
            plan.protocol.transport().describe(),
            plan.target_text,
            plan.name,
            scenario::format_duration(plan.duration)
        );
    }
    if console.verbose >= 1 {
        say_inline!("{}", plan.describe_with(send_path(&plan).as_deref()));
    }
    let mut printer = progress::Progress::new(plan.planned, plan.duration, plan.stages.clone());
    // A run refused before it starts leaves no folder behind: the staged log is removed when
    // dropped, and the folder (if this run created it) when `run_dir` is.
    let mut hlog = report::hlog::HlogWriter::new(
        run_dir.stage("histograms.hlog")?,
        std::time::SystemTime::now(),
        &format!("{} ({})", plan.name, plan.protocol.name()),
    )
    .with_context(|| {
        format!(
            "creating {}",
            run_dir.file_path("histograms.hlog").display()
        )
    })?;
    let mut hlog_error = None;
    let metrics = match a.metrics_listen {
        Some(addr) => match metrics_listen::MetricsServer::start(addr) {
            Ok(m) => {
                say!("metrics  http://{}/metrics", m.addr());
                Some(m)
            }
            Err(e) => {
                say!("error: {e:#}");
                return Ok(EXIT_USAGE);
            }
        },
        None => None,
    };
    // What the report says of the run (the scenario's hash read once): for the live page
    // and for the summary at the end.
    let info = run_info(&plan, &a.ov, &a.label);
    let dashboard = match a.dashboard {
        Some(addr) => {
            let live = dashboard::LiveReport::new(
                &info,
                plan.planned,
                plan.workers.max(1),
                plan.target_text.clone(),
                plan.duration,
            );
            match dashboard::Dashboard::start(addr, live) {
                Ok(d) => {
                    say!("dashboard http://{}/", d.addr());
                    Some(d)
                }
                Err(e) => {
                    say!("error: {e:#}");
                    return Ok(EXIT_USAGE);
                }
            }
        }
        None => None,
    };
    let mut exposition = report::prometheus::Exposition::new(
        &plan.name,
        plan.protocol.name().as_str(),
        plan.planned,
    );
    // `server_metrics:`: the embedded server's own endpoint (when one names it) and the
    // scrapers, started once the engine knows its servers and its clock.
    let mut embedded_metrics: Option<metrics_listen::MetricsServer> = None;
    let mut scrapers: Option<scrape::Scrapers> = None;
    let on_start = |start: &engine::RunStart| {
        (embedded_metrics, scrapers) =
            start_server_metrics(&plan, start, Duration::ZERO, plan.duration);
    };
    // Each group's per-second RTT goes into the log beside the whole run's (`merge` reads
    // the groups' per-second percentiles again from it).
    let group_tags: Vec<String> = plan
        .groups
        .iter()
        .map(|g| crate::metrics::groups::rtt_tag(&g.name))
        .collect();
    // `abort_on_fail:`: each second judged on its own; a sustained failure stops the run.
    let mut abort = plan
        .abort_on_fail
        .map(|after| report::abort::AbortJudge::new(&plan.thresholds, after));
    let outcome = match engine::run_observed(&plan, &stop, on_start, |p, c, second| {
        let rec = &second.rec;
        if !console.quiet {
            printer.line(p, c);
        }
        if let Some(a) = abort.as_mut().and_then(|j| j.second(p, rec)) {
            if !stop.is_stopped() {
                say!("stopping: {}", a.describe());
                stop.stop();
            }
        }
        if console.verbose >= 2 {
            if let Ok(line) = serde_json::to_string(p) {
                say!("{line}");
            }
        }
        if hlog_error.is_none() {
            hlog_error = hlog.interval(p.t as u64 - 1, rec).err();
        }
        for (tag, rtt) in group_tags.iter().zip(&second.group_rtt) {
            if hlog_error.is_none() {
                hlog_error = hlog.histogram(p.t as u64 - 1, tag, rtt).err();
            }
        }
        if let Some(d) = &dashboard {
            d.second(p, c, rec);
        }
        if let Some(m) = &metrics {
            exposition.update(p, c, rec);
            m.publish(exposition.render());
        }
    }) {
        Ok(o) => o,
        Err(e @ (EngineError::FdLimit(_) | EngineError::SourceAddress(_))) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    for w in &outcome.unfinished_workers {
        say!(
            "worker {w} did not end within {} s of the stop: the report holds what it handed \
             in until then",
            engine::END_GRACE.as_secs()
        );
    }
    let last = outcome
        .intervals
        .iter()
        .rev()
        .find(|p| !p.partial)
        .map(|p| p.t as u64)
        .unwrap_or(0);
    if hlog_error.is_none() {
        hlog_error = hlog.interval(last, &outcome.tail).err();
    }
    for g in &outcome.groups {
        if hlog_error.is_none() {
            hlog_error = hlog
                .histogram(last, &crate::metrics::groups::rtt_tag(&g.name), &g.tail_rtt)
                .err();
        }
    }
    // A log that could not be written whole is not kept (nor read by the report): a
    // truncated one would pass for the run's.
    let hlog = match hlog_error {
        None => match hlog.finish() {
            Ok(staged) => Some(staged),
            Err(e) => {
                hlog_error = Some(e);
                None
            }
        },
        Some(_) => None,
    };
    if let Some(e) = hlog_error {
        say!(
            "warning: {} not written: {e}",
            run_dir.file_path("histograms.hlog").display()
        );
    }
    if let Some(m) = &metrics {
        exposition.finish(&outcome.tail, outcome.elapsed.as_secs_f64());
        m.publish(exposition.render());
    }
    let mut outcome = outcome;
    outcome.server_metrics = scrapers.and_then(scrape::Scrapers::finish);
    drop(embedded_metrics);
    if let Some(sm) = &outcome.server_metrics {
        for e in &sm.endpoints {
            if e.failed.total() > 0 {
                say!(
                    "warning: server_metrics {}: {} of {} scrapes gave nothing ({} connect, {} timeout, {} HTTP status, {} not metrics, {} cut short, {} left behind at the run's end)",
                    e.url, e.failed.total(), e.scrapes, e.failed.connect, e.failed.timeout, e.failed.http_status, e.failed.garbage, e.failed.truncated, e.failed.abandoned
                );
            }
            if e.dropped.total() > 0 {
                say!(
                    "warning: server_metrics {}: samples not kept: {} not finite, {} bad histograms, {} over a series cap ({} series), {} points over the run's cap",
                    e.url, e.dropped.non_finite, e.dropped.bad_histogram, e.dropped.samples_left_out, e.series_left_out, e.dropped.points_over_cap
                );
            }
        }
    }
    let mut summary = report::summarize(&info, &outcome);
    if let Some(fired) = abort.and_then(report::abort::AbortJudge::fired) {
        summary.aborted = Some(fired);
        summary.verdict = "fail".into();
    }
    report::interruption::apply(&mut summary, plan.duration, plan.interrupted);
    let written = report::write_all(&run_dir, &summary, plan.junit, hlog)
        .context("the report was not written")?;
    warn_if_moved(&run_dir);
    if let Some(d) = dashboard {
        let path = written.report_html.display().to_string();
        let html = std::fs::read_to_string(&written.report_html)
            .unwrap_or_else(|e| format!("{path} could not be read back: {e}"));
        let (stats, viewers) = d.finish(html, path);
        if console.verbose >= 1 {
            say!(
                "dashboard: {} pages rendered, slowest {:.1} ms, {:.1} ms on average; at most {viewers} viewer(s) at once",
                stats.frames,
                stats.slowest.as_secs_f64() * 1e3,
                stats.total.as_secs_f64() * 1e3 / stats.frames.max(1) as f64
            );
        }
    }
    if !console.quiet {
        progress::print_result(&summary);
        say!("summary  {}", written.summary_json.display());
        say!("report   {}", written.report_html.display());
        if let Some(j) = &written.junit_xml {
            say!("junit    {}", j.display());
        }
        if let Some(h) = &written.hlog {
            say!("hlog     {}", h.display());
        }
    }
    if a.output.json {
        print_json(&summary)?;
    }
    // A run stopped before any handshake could finish says so through its verdict, not as
    // an unreachable target; so does a server that answered in another dialect (reachable,
    // and the verdict names the dialect to set).
    if outcome.ever_connected == 0
        && !outcome.interrupted
        && report::reasons::other_dialect(&summary).is_none()
    {
        // Name what was seen: handshake refusals, else what the sockets reported (an ICMP
        // port unreachable shows as connection_refused), else silence. "()" told nothing.
        let reasons = if !summary.errors.connect.is_empty() {
            report::format::fmt_counts(&summary.errors.connect)
        } else if !summary.generator.send_errors.is_empty() {
            format!(
                "no reply; socket errors {}",
                report::format::fmt_counts(&summary.generator.send_errors)
            )
        } else {
            "no reply from the server".to_string()
        };
        say!(
            "error: target unreachable: no bot completed the handshake with {} ({reasons})",
            outcome.target,
        );
        return Ok(EXIT_UNREACHABLE);
    }
    Ok(if summary.verdict == "pass" {
        EXIT_PASS
    } else {
        EXIT_FAIL
    })
}

/// `server_metrics:`: the embedded server's own endpoint (when one names it) and the scrapers
/// of this shard's endpoints, scraping from `offset` after the run's start for `duration`
/// (a capacity step scrapes its judged window only). Both `None` when nothing is scraped.
pub(super) fn start_server_metrics(
    plan: &Plan,
    start: &engine::RunStart,
    offset: Duration,
    duration: Duration,
) -> (
    Option<metrics_listen::MetricsServer>,
    Option<scrape::Scrapers>,
) {
    let shard = plan.shard.map_or(0, |s| s.index);
    let mine: Vec<_> = plan
        .server_metrics
        .iter()
        .filter(|e| e.shard == shard)
        .cloned()
        .collect();
    if mine.is_empty() {
        return (None, None);
    }
    let mut embedded = None;
    if mine.iter().any(|e| e.is_embedded()) && !start.servers.is_empty() {
        match serve::live_endpoint(
            (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            plan.protocol.name().as_str(),
            start.servers.clone(),
        ) {
            Ok(m) => embedded = Some(m),
            Err(e) => say!("warning: the embedded server's /metrics: {e:#}"),
        }
    }
    let url = embedded
        .as_ref()
        .map(|m: &metrics_listen::MetricsServer| format!("http://{}/metrics", m.addr()));
    let scrapers = scrape::Scrapers::start(&mine, url.as_deref(), start.at + offset, duration);
    (embedded, Some(scrapers))
}

/// The scenario and protocol facts the report prints beside the measurements.
pub(super) fn run_info(plan: &Plan, ov: &OverrideArgs, label: &LabelArg) -> report::RunInfo {
    let info = plan.protocol.info();
    report::RunInfo {
        scenario: plan.name.clone(),
        scenario_file: plan.file.display().to_string(),
        protocol: info.name.into(),
        transport: plan.protocol.transport().describe(),
        dialect: plan.protocol.dialect_name(),
        rtt_source: engine::io::rtt_source(plan.protocol.transport(), plan.protocol.measures_rtt())
            .map(Into::into),
        seed: plan.seed,
        shard: plan.shard.map(|s| report::summary::ShardId {
            index: s.index,
            count: s.count,
        }),
        scenario_hash: scenario_hash(plan, ov),
        label: label.label.clone(),
        loss_method: report::summary::LossMethod {
            downstream: info.downstream_loss.into(),
            upstream: info.upstream_loss.into(),
        },
        metrics: engine::io::transport_metrics(plan.protocol.transport())
            .iter()
            .chain(info.metrics)
            .copied()
            .collect(),
        thresholds: plan.thresholds.clone(),
        input_rate_hz: plan.bot_template.input_rate_hz,
        snapshot_rate_hz: plan.server.snapshot_rate.map(f64::from),
        cannot_measure: cannot_measure(plan),
        unmeasurable: plan.unmeasurable,
        network: plan
            .network
            .as_ref()
            .and_then(|n| serde_json::to_value(n).ok()),
    }
}

/// The plan's thresholds (its own and the default checks) on a figure its protocol
/// configuration cannot take, with why.
pub(super) fn unmeasurable_thresholds(plan: &Plan) -> Vec<(&scenario::Threshold, String)> {
    let cannot = cannot_measure(plan);
    plan.thresholds
        .iter()
        .filter_map(|t| {
            cannot
                .iter()
                .find(|(m, _)| m.same_figure(t.metric))
                .map(|(_, why)| (t, why.clone()))
        })
        .collect()
}

/// What was run, as a hash shards of one run share: the scenario file's bytes and the
/// overrides that shape the population (not the target, the output folder, the shard or the
/// seed, which summary.json records apart: whole runs of one scenario on several machines may
/// use their own seeds; shards of one run must share it, and merge checks that).
/// `None` when the file cannot be read again.
fn scenario_hash(plan: &Plan, ov: &OverrideArgs) -> Option<String> {
    let text = scenario::read_bounded(&plan.file).ok()?;
    let shape = format!(
        "bots={:?};duration_ms={}",
        ov.bots,
        plan.duration.as_millis()
    );
    Some(report::summary::fnv1a64(&[
        text.as_bytes(),
        shape.as_bytes(),
    ]))
}

/// The figures this plan's protocol configuration cannot take, with why: those its thresholds
/// name, and both losses (their method lines in the report say so).
fn cannot_measure(plan: &Plan) -> Vec<(scenario::Metric, String)> {
    let mut out: Vec<(scenario::Metric, String)> = Vec::new();
    let rtt = scenario::Metric::Time(
        scenario::threshold::TimeMetric::Rtt,
        scenario::threshold::Stat::P50,
    );
    if engine::io::rtt_source(plan.protocol.transport(), plan.protocol.measures_rtt()).is_none() {
        out.push((
            rtt,
            "the protocol's dialect has no RTT probe and its transport takes no RTT samples".into(),
        ));
    }
    let metrics = plan.thresholds.iter().map(|t| t.metric);
    for m in metrics.chain([
        scenario::Metric::UpstreamLoss,
        scenario::Metric::DownstreamLoss,
    ]) {
        if let Some(why) = plan.protocol.cannot_measure(m) {
            if !out.iter().any(|(o, _)| *o == m) {
                out.push((m, why.to_string()));
            }
        }
    }
    out
}
