//! `toolwire replay`: drive a recorded session through a real server.

use std::path::PathBuf;
use std::process::ExitCode;

use super::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// JSON Lines of messages (or toolwire transcript lines); `.gz` is fine.
    path: Option<PathBuf>,
    /// Where the transcript and artifacts go, and stay (default: a fresh
    /// temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Keep the temporary data directory instead of removing it.
    #[arg(long, conflicts_with = "data_dir")]
    keep: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Generate and replay a synthetic session of N turns instead.
    #[arg(long, value_name = "N", conflicts_with = "path")]
    synthetic: Option<usize>,
    /// Seed for `--synthetic`.
    #[arg(long, default_value_t = 1, requires = "synthetic")]
    seed: u64,
    /// Session id to replay into.
    #[arg(long, default_value = "replay")]
    session: String,
    /// Earlier messages sent along with each `budget/apply`.
    #[arg(long, default_value_t = 8)]
    tail: usize,
    /// Provider format of the bundled or synthetic session (a recording
    /// file says its own).
    #[arg(long, value_enum, conflicts_with = "path")]
    format: Option<super::check::FormatArg>,
    /// Price the session instead of replaying it: sent raw, through the
    /// budget, and with clearing, under this provider's prompt-cache
    /// prices (PROTOCOL.md 11.3).
    #[arg(long, value_enum, value_name = "PROVIDER")]
    price: Option<toolwire::replay::price::Provider>,
    /// With --price: the clearing mode priced beside `auto` (default:
    /// `batch`, or the configuration's mode when it is not `auto`).
    #[arg(long, value_enum, requires = "price")]
    clearing_mode: Option<ClearingModeArg>,
    /// With --price: clearing's keepRecent.
    #[arg(long, value_name = "N", requires = "price")]
    keep_recent: Option<u64>,
    /// With --price: clearing's minChars.
    #[arg(long, value_name = "N", requires = "price")]
    min_chars: Option<u64>,
    /// With --price: clearing's triggerChars.
    #[arg(long, value_name = "N", requires = "price")]
    trigger_chars: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ClearingModeArg {
    Off,
    Batch,
    Cold,
}

pub fn run(args: Args) -> ExitCode {
    use toolwire::replay;
    let fail = |msg: String| {
        eprintln!("toolwire replay: {msg}");
        ExitCode::FAILURE
    };
    let format = args
        .format
        .map(toolwire::format::Format::from)
        .unwrap_or_default();
    let (format, steps) = match (&args.path, args.synthetic) {
        (_, Some(turns)) => (
            format,
            replay::convert::steps_to(format, replay::synthetic::generate(turns, args.seed)),
        ),
        (Some(path), None) => {
            match replay::read_recording(path).and_then(|t| replay::parse_any(&t)) {
                Ok(parsed) => parsed,
                Err(err) => return fail(err),
            }
        }
        (None, None) => match replay::bundled_recording().and_then(|t| replay::parse_recording(&t))
        {
            Ok(steps) => (format, replay::convert::steps_to(format, steps)),
            Err(err) => return fail(err),
        },
    };
    let what = match (&args.path, args.synthetic) {
        (_, Some(n)) => format!("--synthetic {n}"),
        (Some(path), None) => path.display().to_string(),
        (None, None) => "the bundled session".to_owned(),
    };
    if !steps.iter().any(|s| matches!(s, replay::Step::Message(_))) {
        return fail(format!("{what}: no messages to replay"));
    }
    if let Some(provider) = args.price {
        return price(&args, &what, format, &steps, provider);
    }
    // A directory the user named stays; a temporary one is removed when
    // `temp` drops (after the server has stopped), unless `--keep`.
    let mut temp = None;
    let data_dir = match &args.data_dir {
        Some(dir) => match std::fs::create_dir_all(dir).and_then(|()| std::path::absolute(dir)) {
            Ok(dir) => dir,
            Err(err) => return fail(format!("{}: {err}", dir.display())),
        },
        None => match replay::fresh_data_dir() {
            Ok(dir) => temp.insert(dir).path().to_path_buf(),
            Err(err) => return fail(format!("creating a data directory: {err}")),
        },
    };
    let kept = temp.is_none() || args.keep;
    if args.keep {
        temp.take().map(tempfile::TempDir::keep);
    }
    let server = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return fail(format!("locating the toolwire executable: {err}")),
    };
    let options = replay::Options {
        server,
        data_dir,
        session_id: args.session,
        tail: args.tail,
        format,
    };
    let bar = indicatif::ProgressBar::new(steps.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(err) => return fail(format!("cannot start the runtime: {err}")),
    };
    let outcome = rt.block_on(replay::run(&steps, &options, || bar.inc(1)));
    bar.finish_and_clear();
    match outcome {
        Ok(summary) if args.json => match serde_json::to_string_pretty(&summary) {
            Ok(text) => {
                super::say!("{text}");
                ExitCode::SUCCESS
            }
            Err(err) => fail(err.to_string()),
        },
        Ok(summary) => {
            super::say!("{}", replay::render(&summary, kept).trim_end_matches('\n'));
            ExitCode::SUCCESS
        }
        Err(err) => fail(err.to_string()),
    }
}

/// `--price`: the session priced three ways, with the configuration of the
/// current directory's `toolwire.toml` (else the defaults) and the clearing
/// flags over it.
fn price(
    args: &Args,
    what: &str,
    format: toolwire::format::Format,
    steps: &[toolwire::replay::Step],
    provider: toolwire::replay::price::Provider,
) -> ExitCode {
    use toolwire::budget::clearing::ClearingMode;
    use toolwire::replay::price;
    let config = match std::env::current_dir()
        .map_err(|e| e.to_string())
        .and_then(|dir| toolwire::config::load(&dir, None).map_err(|e| e.to_string()))
    {
        Ok(config) => config,
        Err(err) => {
            eprintln!("toolwire replay: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut clearing = config.clearing;
    if let Some(mode) = args.clearing_mode {
        clearing.mode = match mode {
            ClearingModeArg::Off => ClearingMode::Off,
            ClearingModeArg::Batch => ClearingMode::Batch,
            ClearingModeArg::Cold => ClearingMode::Cold,
        };
    }
    clearing.keep_recent = args.keep_recent.unwrap_or(clearing.keep_recent);
    clearing.min_chars = args.min_chars.unwrap_or(clearing.min_chars);
    clearing.trigger_chars = args.trigger_chars.unwrap_or(clearing.trigger_chars);
    let settings = price::Settings {
        limits: config.limits,
        unit: config.size_unit,
        preview_mode: config.preview_mode,
        tools: config.tools,
        exempt_tools: config.exempt_tools,
        clearing,
        pricing: config.pricing,
    };
    let pricing = price::price(steps, format, provider, &settings);
    if args.json {
        match serde_json::to_string_pretty(&pricing) {
            Ok(text) => super::say!("{text}"),
            Err(err) => {
                eprintln!("toolwire replay: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        super::say!("{}", price::render(&pricing, what).trim_end_matches('\n'));
    }
    ExitCode::SUCCESS
}
