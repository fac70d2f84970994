//! `toolwire import --from AGENT FILE [-o OUT]`: convert another agent's
//! session file into a toolwire transcript (PROTOCOL.md section 10.5);
//! `--from messages` wraps a file of bare provider messages, the file
//! `repair` refuses to rewrite in place.
//! The transcript goes to OUT (written whole or not at all) or to stdout;
//! what was read and left out goes to stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use toolwire::transcript::import::{self, Agent, Conversion};

#[derive(clap::Args)]
pub struct Args {
    /// The agent that wrote FILE, or `messages` for a file of bare provider
    /// messages, one a line.
    #[arg(long, value_name = "AGENT", value_parser = PossibleValuesParser::new(Agent::ALL.map(Agent::name).into_iter().chain([MESSAGES])))]
    from: String,
    /// With `--from messages`: the provider format of the messages (default:
    /// what their shape shows, else anthropic).
    #[arg(long, value_enum)]
    format: Option<super::check::FormatArg>,
    /// Its session file.
    file: PathBuf,
    /// Write the transcript here instead of to stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

/// `--from` for a file of bare messages rather than an agent's session.
const MESSAGES: &str = "messages";

pub fn run(args: Args) -> ExitCode {
    match import(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolwire import: {err}");
            ExitCode::FAILURE
        }
    }
}

/// What `import` writes from: a file converted whole, or an agent's
/// session or a file of bare messages converted as it is read.
enum Source {
    Whole(Conversion),
    Agent(import::streamed::AgentFile),
    Messages(import::messages::MessagesFile),
}

impl Source {
    fn write_transcript(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Source::Whole(conversion) => conversion.write_transcript(out),
            Source::Agent(file) => file.write_transcript(out),
            Source::Messages(file) => file.write_transcript(out),
        }
    }

    /// Messages written, their format, and what was read and left out.
    fn summary(&self) -> (usize, import::Format, &import::Report) {
        match self {
            Source::Whole(c) => (c.messages.len(), c.format, &c.report),
            Source::Agent(f) => (f.messages, f.format, &f.report),
            Source::Messages(f) => (f.messages, f.format, &f.report),
        }
    }
}

fn import(args: &Args) -> Result<(), String> {
    let (mut source, title) = if args.from == MESSAGES {
        let format = args.format.map(import::Format::from);
        let source = match import::messages::open(&args.file, format).map_err(|e| e.to_string())? {
            import::messages::Opened::Stream(file) => Source::Messages(file),
            import::messages::Opened::Whole(conversion) => Source::Whole(conversion),
        };
        (source, "bare messages")
    } else {
        if args.format.is_some() {
            return Err(format!(
                "--format applies to --from {MESSAGES} only: an agent's session converts to its own format"
            ));
        }
        let agent =
            Agent::from_name(&args.from).ok_or_else(|| format!("unknown agent {}", args.from))?;
        let source = match import::streamed::open(agent, &args.file).map_err(|e| e.to_string())? {
            import::streamed::Opened::Stream(file) => Source::Agent(file),
            import::streamed::Opened::Whole(conversion) => Source::Whole(conversion),
        };
        (source, agent.title())
    };
    match &args.output {
        Some(out) => {
            // Into the data directory, the transcript is private as
            // everything there; elsewhere it is the user's file, made with
            // the usual mode.
            let private = super::prepare_data_dir().is_some_and(|data_dir| {
                let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
                std::fs::canonicalize(parent.unwrap_or(Path::new(".")))
                    .is_ok_and(|dir| dir.starts_with(&data_dir))
            });
            write_file(out, &mut source, private)?
        }
        None => {
            // Buffered: the stream writes a line at a time, and stdout
            // alone would write each one as it ends.
            let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            match source
                .write_transcript(&mut stdout)
                .and_then(|()| stdout.flush())
            {
                // A closed pipe (`| head`) ends the output, not in failure.
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                other => other.map_err(|e| format!("writing the transcript: {e}"))?,
            }
        }
    }
    let (messages, format, report) = source.summary();
    eprintln!(
        "{}: {} -> {} {} messages ({})",
        args.file.display(),
        title,
        messages,
        format,
        report
    );
    Ok(())
}

/// Write atomically: a new file beside OUT (with the usual mode, 0600 when
/// `private`, or OUT's mode when it exists), renamed over it.
fn write_file(out: &Path, source: &mut Source, private: bool) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", out.display());
    let name = out
        .file_name()
        .ok_or_else(|| format!("{}: not a file name", out.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".import-{}", std::process::id()));
    let tmp = out.with_file_name(tmp_name);
    let written = (|| {
        let mut options = if private {
            toolwire::private::file_options()
        } else {
            std::fs::OpenOptions::new()
        };
        let mut file = options.write(true).create_new(true).open(&tmp)?;
        if let Ok(meta) = std::fs::metadata(out) {
            file.set_permissions(meta.permissions())?;
        }
        let mut buffered = std::io::BufWriter::new(&mut file);
        source.write_transcript(&mut buffered)?;
        buffered.flush()?;
        drop(buffered);
        file.sync_all()?;
        std::fs::rename(&tmp, out)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(fail)
}
