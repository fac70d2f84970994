//! `toolwire gc [--dry-run] [--json]`: remove expired sessions,
//! unreferenced artifacts and temporary leftovers from the workspace's
//! data directory, by its `retention` settings (see `retention`). Sessions
//! a running server holds are left alone (their locks say so). A progress
//! bar on stderr follows large stores when stderr is a terminal.

use super::ForCli;
use std::path::PathBuf;
use std::process::ExitCode;

use toolwire::retention::{self, GcReport};

#[derive(clap::Args)]
pub struct Args {
    /// List what would be removed, removing nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the result as JSON (`{sessionsRemoved, artifactsRemoved,
    /// bytesFreed, kept}`, as `storage/gc` answers).
    #[arg(long)]
    json: bool,
    /// The workspace whose data directory to collect (default: the current
    /// directory; its toolwire.toml is honoured).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    match gc(&args) {
        Ok(report) => {
            print(&report, &args);
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire gc: {err}");
            ExitCode::FAILURE
        }
    }
}

fn gc(args: &Args) -> Result<GcReport, String> {
    let workspace = args
        .workspace
        .clone()
        .map_or_else(std::env::current_dir, Ok)
        .map_err(|err| format!("no workspace directory: {err}"))?;
    let config = toolwire::config::load(&workspace, None).map_err(|err| err.for_cli())?;
    toolwire::private::prepare(&config.data_dir);
    if config.storage.objects.is_some() {
        toolwire::egress::configure(&config.egress())?;
    }
    let policy = config.retention.policy(std::time::SystemTime::now());
    let objects = match &config.storage.objects {
        Some(objects) => Some(
            toolwire::artifact::objects::ObjectArtifacts::open(objects)
                .map_err(|err| err.for_cli())?,
        ),
        None => None,
    };
    if let Some(pg) = toolwire::store::postgres_of(&config.storage).map_err(|e| e.for_cli())? {
        use toolwire::store::SharedStore;
        let rt = super::runtime().map_err(|err| format!("cannot start the runtime: {err}"))?;
        return rt
            .block_on(async {
                pg.check_schema().await?;
                pg.collect(&config.data_dir, objects, &policy, args.dry_run)
                    .await
            })
            .map_err(|err| err.for_cli());
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>9} {bar:40} {pos}/{len} sessions {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = retention::collect(
        &config.data_dir,
        objects.as_deref(),
        &policy,
        args.dry_run,
        &|_| false,
        &mut |p| {
            bar.set_length(p.total);
            bar.set_position(p.done);
            bar.set_message(p.phase);
        },
    )
    .map_err(|err| err.for_cli());
    bar.finish_and_clear();
    report
}

#[allow(clippy::print_stdout)]
fn print(report: &GcReport, args: &Args) {
    if args.json {
        match serde_json::to_string_pretty(report) {
            Ok(text) => println!("{text}"),
            Err(err) => eprintln!("toolwire gc: {err}"),
        }
        return;
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for id in &report.sessions_removed {
        println!("{verb} session {id}");
    }
    for path in &report.artifacts_removed {
        println!("{verb} {path}");
    }
    println!(
        "{verb} {} sessions and {} other files, {} bytes; kept {} sessions",
        report.sessions_removed.len(),
        report.artifacts_removed.len(),
        report.bytes_freed,
        report.kept
    );
}
