//! Rewriting a transcript so that a provider accepts it (PROTOCOL.md 10.2),
//! keeping every real result.
//!
//! Turns and pairs are read by [`crate::format::pair`], the same reading
//! the guard and `transcript/check` use. Repair drops only what cannot be
//! sent: a call with no result (not its answered siblings), a result that
//! answers no call of the turn before it, a second result for one call,
//! tool blocks in the wrong role, a message left with nothing in it, and
//! torn or unparsable lines. A result that answers its call but follows
//! other content of its turn is moved to the front of the turn. Nothing is
//! invented, lines that need no change are copied byte for byte, and a
//! transcript that is already valid is not rewritten at all.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Lines;
use super::stream::{Line, LineParser, Run, Source};
use super::writer;
use crate::error::{Error, Result};
use crate::format::{self, Dialect, Fault, Format, ItemKind};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRepairResult {
    /// Whether the file was rewritten (with `dryRun`: would be). A valid
    /// transcript is never rewritten and gets no `.bak`.
    pub changed: bool,
    /// Lines kept.
    pub kept: usize,
    pub dropped_tool_uses: Vec<String>,
    pub dropped_tool_results: Vec<String>,
    /// Ids of results moved ahead of the other content of their turn
    /// (a result that came after text in the message answering its call).
    #[serde(default)]
    pub moved_tool_results: Vec<String>,
    /// Calls given a new id to keep the provider's id rules (PROTOCOL.md
    /// 11.2), their results with them.
    #[serde(default)]
    pub renamed_tool_uses: Vec<RenamedId>,
    pub torn_lines: usize,
}

/// A call id repair changed, and what it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RenamedId {
    pub from: String,
    pub to: String,
}

/// The lines of a transcript, parsed; torn or unparsable lines counted.
pub struct Parsed {
    lines: Vec<Line>,
    pub torn_lines: usize,
    /// Whether any line is a transcript line toolwire knows.
    pub recognized: bool,
    /// The `type` of the first line, if it had one (for error messages).
    pub first_type: Option<String>,
}

/// Split transcript bytes into lines.
pub fn parse(input: &[u8]) -> Parsed {
    let mut parsed = Parsed {
        lines: Vec::new(),
        torn_lines: 0,
        recognized: false,
        first_type: None,
    };
    let mut lines = LineParser::default();
    let mut rest = input;
    while !rest.is_empty() {
        let (line, tail, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..], true),
            None => (rest, &rest[rest.len()..], false),
        };
        rest = tail;
        if let Some(line) = lines.push(line, complete) {
            parsed.lines.push(line);
        }
    }
    parsed.torn_lines = lines.torn_lines;
    parsed.recognized = lines.recognized;
    parsed.first_type = lines.first_type;
    parsed
}

impl Parsed {
    /// The messages, in order.
    pub fn messages(&self) -> Vec<&Value> {
        messages_of(&self.lines).collect()
    }
}

/// Repair transcript bytes; returns the new bytes, the report and whether
/// anything changed.
pub fn repair_bytes(format: Format, input: &[u8]) -> (Vec<u8>, TranscriptRepairResult, bool) {
    let parsed = parse(input);
    repair_parsed(format.dialect(), parsed)
}

fn repair_parsed(dialect: &dyn Dialect, parsed: Parsed) -> (Vec<u8>, TranscriptRepairResult, bool) {
    let mut report = TranscriptRepairResult {
        torn_lines: parsed.torn_lines,
        ..TranscriptRepairResult::default()
    };
    let mut lines = parsed.lines;
    let changed = repair_lines(dialect, &mut lines, &mut report) || report.torn_lines > 0;
    let mut out = Vec::with_capacity(report.kept * 64);
    for line in &lines {
        match line {
            Line::Raw(raw) | Line::Message { raw: Some(raw), .. } => {
                out.extend_from_slice(raw);
                out.push(b'\n');
            }
            Line::Message { value, raw: None } => {
                let mut buf = Lines::default();
                buf.push_message(value);
                out.extend_from_slice(&buf.bytes);
            }
        }
    }
    report.kept = lines.len();
    (out, report, changed)
}

/// Make `lines` keep the provider's id rules, then its pairing rules.
/// Returns whether anything changed.
fn repair_lines(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
    report: &mut TranscriptRepairResult,
) -> bool {
    // First the call ids the provider would refuse (PROTOCOL.md 11.2, see
    // [`format::ids`]): renamed, exact repetitions of a pair dropped.
    // Paired once for them and, when they change nothing, for the first
    // round of the pairing rules too.
    let pairing = format::pair(dialect, messages_of(lines));
    let plan = format::ids::plan_paired(dialect, &messages_of(lines).collect::<Vec<_>>(), &pairing);
    let mut changed = apply_ids(dialect, lines, plan, report);
    let (step, rounds) = pairing_rounds_from(dialect, lines, (!changed).then_some(pairing));
    changed |= step;
    for round in rounds {
        report.append(round);
    }
    changed
}

/// The pairing rules kept: whether anything changed, and what each round
/// did (a report of the conversation lists all of one round before the
/// next; a transcript read as a stream gathers each round's runs).
fn pairing_rounds(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
) -> (bool, Vec<TranscriptRepairResult>) {
    pairing_rounds_from(dialect, lines, None)
}

/// [`pairing_rounds`], given the pairing of `lines` as they are, if known.
fn pairing_rounds_from(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
    mut pairing: Option<format::Pairing>,
) -> (bool, Vec<TranscriptRepairResult>) {
    let mut changed = false;
    let mut rounds = Vec::new();
    // Dropping a message can join the turns around it, which can fault a
    // pair that was fine; a few rounds reach the fixed point (each round
    // only removes or reorders, so it ends).
    for _ in 0..16 {
        let mut report = TranscriptRepairResult::default();
        let step = repair_round(dialect, lines, pairing.take(), &mut report);
        changed |= step;
        if !step {
            break;
        }
        rounds.push(report);
    }
    (changed, rounds)
}

impl TranscriptRepairResult {
    /// Add what `later` did after what this did.
    fn append(&mut self, later: TranscriptRepairResult) {
        self.dropped_tool_uses.extend(later.dropped_tool_uses);
        self.dropped_tool_results.extend(later.dropped_tool_results);
        self.moved_tool_results.extend(later.moved_tool_results);
        self.renamed_tool_uses.extend(later.renamed_tool_uses);
    }
}

/// Carry out an id plan of `lines`' messages. Returns whether anything
/// changed.
fn apply_ids(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
    plan: format::ids::IdPlan,
    report: &mut TranscriptRepairResult,
) -> bool {
    let at = message_lines(lines);
    if plan.is_empty() {
        return false;
    }
    for rename in plan.renames {
        let (m, index) = rename.at;
        if let Line::Message { value, raw } = &mut lines[at[m]] {
            dialect.set_item_id(value, index, &rename.to);
            *raw = None;
        }
        if rename.kind == ItemKind::Call {
            report.renamed_tool_uses.push(RenamedId {
                from: rename.from,
                to: rename.to,
            });
        }
    }
    let mut drop: Vec<Vec<usize>> = vec![Vec::new(); at.len()];
    for ((m, index), kind, id) in plan.repeats {
        drop[m].push(index);
        match kind {
            ItemKind::Call => report.dropped_tool_uses.push(id),
            _ => report.dropped_tool_results.push(id),
        }
    }
    rebuild(dialect, lines, drop, Vec::new());
    true
}

/// One round: drop every faulty call and result, move late results to the
/// front of their turn. Returns whether anything changed.
fn repair_round(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
    pairing: Option<format::Pairing>,
    report: &mut TranscriptRepairResult,
) -> bool {
    // Message number → line index.
    let at = message_lines(lines);
    let pairing = pairing.unwrap_or_else(|| format::pair(dialect, messages_of(lines)));
    if pairing.is_valid() {
        return false;
    }
    // Per message: items to drop, items to move to the front of the turn.
    let mut drop: Vec<Vec<usize>> = vec![Vec::new(); at.len()];
    let mut late: Vec<Vec<usize>> = vec![Vec::new(); at.len()];
    for v in pairing.faults() {
        match v.fault {
            Some(Fault::Late) => {
                late[v.message].push(v.index);
                report.moved_tool_results.push(v.id.clone());
            }
            Some(_) => {
                drop[v.message].push(v.index);
                match v.kind {
                    ItemKind::Call => report.dropped_tool_uses.push(v.id.clone()),
                    _ => report.dropped_tool_results.push(v.id.clone()),
                }
            }
            None => {}
        }
    }
    // A reasoning item goes with the call items after it: when every one
    // of them is dropped, so is it (never otherwise).
    for (m, &line) in at.iter().enumerate() {
        let Line::Message { value, .. } = &lines[line] else {
            continue;
        };
        if !drop[m].is_empty() || !dialect.leads_calls(value) {
            continue;
        }
        let mut followers = 0;
        let mut all_dropped = true;
        for (k, &next) in at.iter().enumerate().skip(m + 1) {
            let Line::Message { value: next, .. } = &lines[next] else {
                continue;
            };
            if dialect.side(next) != Some(format::Side::Assistant) || dialect.leads_calls(next) {
                break;
            }
            followers += 1;
            let mut d = drop[k].clone();
            d.sort_unstable();
            d.dedup();
            all_dropped &= !d.is_empty() && dialect.without_items(next, &d).is_none();
        }
        if followers > 0 && all_dropped {
            drop[m].push(0);
        }
    }
    // Late results, gathered per turn in order, go in a message of their own
    // before the turn's first message.
    let mut insert_before: Vec<(usize, Vec<Value>)> = Vec::new();
    for turn in &pairing.turns {
        let mut moved = Vec::new();
        for &m in &turn.messages {
            if late[m].is_empty() {
                continue;
            }
            if let Line::Message { value, .. } = &lines[at[m]] {
                moved.extend(dialect.only_items(value, &late[m]));
            }
            drop[m].extend(late[m].iter().copied());
        }
        if !moved.is_empty()
            && let Some(&first) = turn.messages.first()
        {
            insert_before.push((at[first], moved));
        }
    }
    rebuild(dialect, lines, drop, insert_before);
    true
}

/// `lines` without the items `drop` names (per message), with the
/// messages of `insert_before` put before the lines they name.
fn rebuild(
    dialect: &dyn Dialect,
    lines: &mut Vec<Line>,
    mut drop: Vec<Vec<usize>>,
    insert_before: Vec<(usize, Vec<Value>)>,
) {
    let mut out: Vec<Line> = Vec::with_capacity(lines.len());
    let mut inserts = insert_before.into_iter().peekable();
    let mut message_no = 0;
    for (i, line) in std::mem::take(lines).into_iter().enumerate() {
        while let Some((_, moved)) = inserts.next_if(|(at, _)| *at == i) {
            out.extend(
                moved
                    .into_iter()
                    .map(|value| Line::Message { value, raw: None }),
            );
        }
        match line {
            Line::Raw(raw) => out.push(Line::Raw(raw)),
            Line::Message { value, raw } => {
                let mut d = std::mem::take(&mut drop[message_no]);
                message_no += 1;
                if d.is_empty() {
                    out.push(Line::Message { value, raw });
                    continue;
                }
                d.sort_unstable();
                d.dedup();
                if let Some(value) = dialect.without_items(&value, &d) {
                    out.push(Line::Message { value, raw: None });
                }
            }
        }
    }
    *lines = out;
}

/// The line index of each message, in order.
fn message_lines(lines: &[Line]) -> Vec<usize> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l, Line::Message { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// The messages among `lines`, in order.
fn messages_of(lines: &[Line]) -> impl Iterator<Item = &Value> {
    lines.iter().filter_map(|l| match l {
        Line::Message { value, .. } => Some(value),
        Line::Raw(_) => None,
    })
}

/// Open `path` for `check` (`lock` false: checking a transcript a live
/// server holds is fine) or repair (locked against live writers): only a
/// regular file (never through a link, never blocking on a FIFO). Its
/// logical bytes (a fork's read through its parent's, and a repair that
/// changes it writes it out whole, parent's lines included) are read as a
/// stream.
pub(crate) fn open_regular(
    path: &Path,
    lock: bool,
) -> Result<(File, super::fork::Logical, fs::Metadata)> {
    let not_regular = |what: &str| {
        Error::invalid_params(
            "path",
            format!(
                "{} is {what}, not a regular file; nothing was written",
                path.display()
            ),
        )
    };
    let meta = fs::symlink_metadata(path).map_err(|err| Error::storage(path, &err))?;
    let kind = describe(&meta.file_type());
    if let Some(kind) = kind {
        return Err(not_regular(kind));
    }
    // O_NOFOLLOW and O_NONBLOCK: if the path was swapped for a link or a
    // FIFO after the check, the open fails or returns at once.
    let file = OpenOptions::new()
        .read(true)
        .append(lock)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|err| match err.raw_os_error() {
            Some(libc::ELOOP) => not_regular("a symbolic link"),
            _ => Error::storage(path, &err),
        })?;
    let meta = file.metadata().map_err(|err| Error::storage(path, &err))?;
    if let Some(kind) = describe(&meta.file_type()) {
        return Err(not_regular(kind));
    }
    if lock {
        writer::lock(&file, path)?;
    }
    let logical = super::fork::Logical::open(&file, path, meta.len())
        .map_err(|err| Error::storage(path, &err))?;
    Ok((file, logical, meta))
}

fn describe(kind: &fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        None
    } else if kind.is_symlink() {
        Some("a symbolic link")
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// The error for a file in which no line is a transcript line.
pub fn unrecognized(path: &Path, first_type: Option<&str>) -> Error {
    let what = match first_type {
        Some(kind) => format!("its first line has type {kind:?}"),
        None => "its first line is not a JSON object with a `type`".to_owned(),
    };
    Error::invalid_params(
        "path",
        format!(
            "{} is not a toolwire transcript: no line is a transcript line of a known format ({what}); nothing was written",
            path.display()
        ),
    )
}

/// Repair the transcript at `path` in place (atomically, the original kept
/// as `<path>.bak`, the mode kept), or only report with `dry_run`. A valid
/// transcript is left untouched and gets no `.bak`. Refuses what is not a
/// regular file, a file that is no transcript, and a transcript another
/// writer holds locked.
pub fn repair_file(
    path: &Path,
    format: Option<Format>,
    dry_run: bool,
) -> Result<TranscriptRepairResult> {
    // Committed lines a power loss left in the commit log only go back
    // into the transcript before it is read.
    super::wal::recover_beside(path).map_err(|err| Error::storage(path, &err))?;
    let (file, logical, meta) = open_regular(path, true)?;
    let source = Source::open(path, &logical)?;
    let foreign = source
        .content
        .filter(|c| !matches!(c, crate::transcript::import::Content::Transcript { .. }));
    if let (Some(found), false) = (foreign, dry_run) {
        // Rewriting another agent's file as a toolwire transcript would
        // lose what that agent keeps in it: say how to get one.
        let from = match found {
            crate::transcript::import::Content::Agent(agent) => agent.name(),
            _ => "messages",
        };
        return Err(Error::invalid_params(
            "path",
            format!(
                "{} is {found}, not a toolwire transcript; nothing was written. `toolwire import --from {from} {} -o NEW.jsonl` converts it into one (then repair NEW.jsonl), and `--dry-run` reports what repair would drop",
                path.display(),
                path.display()
            ),
        ));
    }
    let format = format
        .or(source.content.map(|c| c.format()))
        .unwrap_or_default();
    let dialect = format.dialect();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let storage = |err: std::io::Error| Error::storage(path, &err);
    // The repaired file is written as it is read; it replaces the original
    // only if something changed. A directory that takes no new file fails
    // only a repair that has something to write.
    let tmp = (!dry_run).then(|| tempfile::Builder::new().prefix(".repair-").tempfile_in(dir));
    let (mut tmp, tmp_err) = match tmp {
        Some(Ok(tmp)) => (Some(tmp), None),
        Some(Err(err)) => (None, Some(err)),
        None => (None, None),
    };
    let out = match &tmp {
        Some(tmp) => Some(std::io::BufWriter::with_capacity(
            1 << 16,
            tmp.as_file().try_clone().map_err(storage)?,
        )),
        None => None,
    };
    let mut stream = Streamed {
        dialect,
        planner: format::ids::Planner::for_runs(),
        cut: source.compaction_line(dialect)?,
        pending: Vec::new(),
        phases: Vec::new(),
        changed: false,
        kept: 0,
        out,
    };
    let (parser, lines) =
        source.each_run(dialect, |run, last| stream.run(run, last).map_err(storage))?;
    if !parser.recognized && lines > 0 {
        return Err(unrecognized(path, parser.first_type.as_deref()));
    }
    let mut report = TranscriptRepairResult::default();
    for phase in std::mem::take(&mut stream.phases) {
        report.append(phase);
    }
    report.torn_lines = parser.torn_lines;
    report.kept = stream.kept;
    report.changed = stream.changed || report.torn_lines > 0;
    if dry_run || !report.changed {
        drop(file);
        return Ok(report);
    }
    if let Some(err) = tmp_err {
        return Err(storage(err));
    }
    let (Some(tmp), Some(out)) = (tmp.take(), stream.out.take()) else {
        return Err(storage(std::io::Error::other(
            "no repaired file was written",
        )));
    };
    out.into_inner().map_err(|e| storage(e.into_error()))?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(
            meta.permissions().mode() & 0o7777,
        ))
        .map_err(storage)?;
    tmp.as_file().sync_all().map_err(storage)?;
    // The original inode becomes `<path>.bak` (replacing an older one
    // atomically), then the repaired file takes its name.
    let bak = bak_path(path);
    let bak_tmp = dir.join(format!(".repair-bak-{}", std::process::id()));
    let _ = fs::remove_file(&bak_tmp);
    fs::hard_link(path, &bak_tmp).map_err(storage)?;
    fs::rename(&bak_tmp, &bak).map_err(storage)?;
    tmp.persist(path).map_err(|e| storage(e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(storage)?;
    drop(file);
    Ok(report)
}

/// A transcript repaired as it is read, a run of whole turns at a time
/// (see [`super::stream`]): the same rewrite and report as repairing the
/// whole, holding a run (or the runs a dropped user turn joins), the id
/// mapping's keys and the report.
struct Streamed<'d> {
    dialect: &'d dyn Dialect,
    planner: format::ids::Planner,
    /// The line of the newest compaction: nothing before it is judged.
    cut: Option<usize>,
    /// Runs with their ids mapped, whose repair could still join the next
    /// run's first turn (it dropped the user turn they ended with).
    pending: Vec<Line>,
    /// What the id mapping (0) and each pairing round (1…) did.
    phases: Vec<TranscriptRepairResult>,
    changed: bool,
    kept: usize,
    out: Option<std::io::BufWriter<File>>,
}

impl Streamed<'_> {
    /// Repair `run` (with what is pending before it); `last` when no line
    /// follows it.
    fn run(&mut self, run: Run, last: bool) -> std::io::Result<()> {
        let Run {
            mut lines,
            last_line,
            ..
        } = run;
        if self.cut.is_some_and(|cut| last_line < cut) {
            // Before the newest compaction nothing is repaired; its call
            // ids still bind what comes after.
            self.planner
                .before_cut(self.dialect, &messages_of(&lines).collect::<Vec<_>>());
            return self.emit(lines);
        }
        let plan = self
            .planner
            .plan(self.dialect, &messages_of(&lines).collect::<Vec<_>>());
        if self.phases.is_empty() {
            self.phases.push(TranscriptRepairResult::default());
        }
        self.changed |= apply_ids(self.dialect, &mut lines, plan, &mut self.phases[0]);
        self.pending.extend(lines);
        if format::pair(self.dialect, messages_of(&self.pending)).is_valid() {
            if last || self.ends_open() {
                let pending = std::mem::take(&mut self.pending);
                return self.emit(pending);
            }
            return Ok(());
        }
        let mut repaired = self.pending.clone();
        let (changed, rounds) = pairing_rounds(self.dialect, &mut repaired);
        let pending = std::mem::replace(&mut self.pending, repaired);
        if !last && !self.ends_open() {
            // The repair dropped the user turn the runs ended with: the
            // next run's first turn joins theirs. Judged again with it.
            self.pending = pending;
            return Ok(());
        }
        self.changed |= changed;
        for (r, round) in rounds.into_iter().enumerate() {
            if self.phases.len() < r + 2 {
                self.phases.push(TranscriptRepairResult::default());
            }
            self.phases[r + 1].append(round);
        }
        let repaired = std::mem::take(&mut self.pending);
        self.emit(repaired)
    }

    /// Whether the pending lines end where a run may start: after a user
    /// message (or with no message of either side).
    fn ends_open(&self) -> bool {
        self.pending.iter().rev().find_map(|line| match line {
            Line::Message { value, .. } => self.dialect.side(value),
            Line::Raw(_) => None,
        }) != Some(format::Side::Assistant)
    }

    /// Write lines that are final.
    fn emit(&mut self, lines: Vec<Line>) -> std::io::Result<()> {
        self.kept += lines.len();
        let Some(out) = &mut self.out else {
            return Ok(());
        };
        let mut buf = Lines::default();
        for line in &lines {
            match line {
                Line::Raw(raw) | Line::Message { raw: Some(raw), .. } => {
                    out.write_all(raw)?;
                    out.write_all(b"\n")?;
                }
                Line::Message { value, raw: None } => {
                    buf.bytes.clear();
                    buf.push_message(value);
                    out.write_all(&buf.bytes)?;
                }
            }
        }
        Ok(())
    }
}

pub fn bak_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// Repair a conversation held in memory (the proxy's request) by the same
/// rules as a transcript. `None` when it already satisfies them, so a valid
/// conversation is never touched.
pub fn repair_messages(
    format: Format,
    messages: &[Value],
) -> Option<(Vec<Value>, TranscriptRepairResult)> {
    match repair_owned(format, messages.to_vec()) {
        (repaired, Some(report)) => Some((repaired, report)),
        (_, None) => None,
    }
}

/// [`repair_messages`] on messages the caller hands over: none is copied,
/// and when the pairing needs no repair they come back exactly as given
/// (the proxy's path, where copying a conversation of hundreds of KB on
/// every request only to find it valid was a large part of its cost).
pub fn repair_owned(
    format: Format,
    messages: Vec<Value>,
) -> (Vec<Value>, Option<TranscriptRepairResult>) {
    let mut lines: Vec<Line> = messages
        .into_iter()
        .map(|value| Line::Message { value, raw: None })
        .collect();
    let mut report = TranscriptRepairResult::default();
    let changed = repair_lines(format.dialect(), &mut lines, &mut report);
    let kept = lines.len();
    let messages = lines
        .into_iter()
        .filter_map(|l| match l {
            Line::Message { value, .. } => Some(value),
            Line::Raw(_) => None,
        })
        .collect();
    if !changed {
        return (messages, None);
    }
    report.changed = true;
    report.kept = kept;
    (messages, Some(report))
}
