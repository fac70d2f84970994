//! JSON strings scanned 64 bytes at a time.
//!
//! serde_json checks a string byte by byte and stops at every escape, and
//! tool output (logs, listings, source) has an escaped newline on every
//! line. [`scan_string`] looks at 64 bytes together instead, as simdjson
//! does, and tells where a string ends and what its escapes are like, so
//! that long strings can be kept away from serde_json: the transcript
//! reader's shadow lines (`crate::transcript::shadow`) and large requests'
//! lifted strings (`super::lifted`) are built on it.

/// What a scan of one JSON string found.
#[derive(Debug)]
pub(crate) struct Scanned {
    /// Index of the closing quote.
    pub end: usize,
    /// Every escape is one serde_json writes.
    pub compact: bool,
    /// No byte above 0x7f (else the caller checks the UTF-8).
    pub ascii: bool,
    /// A `\u` escape of a surrogate (serde_json judges those by use).
    pub surrogate: bool,
    /// A `\u0000` escape: the string holds a NUL character.
    pub nul: bool,
}

/// Where a scan writes the string's text (escapes undone) as it goes.
pub(crate) trait Sink {
    /// Whether anything is written at all (the scan is compiled without
    /// the writing when not).
    const WRITES: bool;
    /// `s[from..to]` (at most 64 bytes), bytes of the string that stand
    /// for themselves.
    fn copy(&mut self, s: &[u8], from: usize, to: usize);
    /// The byte a two-byte escape stands for.
    fn push(&mut self, byte: u8);
    /// The scan went on a byte at a time (a `\u` escape, or the end of the
    /// input near): what was written is not the whole text.
    fn give_up(&mut self);
}

/// A scan that writes nothing.
impl Sink for () {
    const WRITES: bool = false;
    fn copy(&mut self, _: &[u8], _: usize, _: usize) {}
    fn push(&mut self, _: u8) {}
    fn give_up(&mut self) {}
}

/// A string's text written by its scan; `whole` unless it gave up.
pub(crate) struct Text {
    pub bytes: Vec<u8>,
    pub whole: bool,
}

impl Sink for Text {
    const WRITES: bool = true;
    fn copy(&mut self, s: &[u8], from: usize, to: usize) {
        // 64 bytes from `from` on, copied whole (a copy of fixed size, no
        // call), then cut back: cheaper than a copy of the exact length.
        match s.get(from..from + 64).map(<&[u8; 64]>::try_from) {
            Some(Ok(run)) if to - from <= 64 => {
                let at = self.bytes.len();
                self.bytes.extend_from_slice(run);
                self.bytes.truncate(at + (to - from));
            }
            _ => self.bytes.extend_from_slice(&s[from..to]),
        }
    }
    fn push(&mut self, byte: u8) {
        self.bytes.push(byte);
    }
    fn give_up(&mut self) {
        self.whole = false;
    }
}

/// Scan the string whose body starts at `start` (after its opening quote);
/// `None` when it is not a valid JSON string: a raw control character, an
/// escape JSON does not have, or no closing quote.
///
/// 64 bytes are looked at together, as simdjson does: a bit for each
/// quote, backslash, control character and byte above 0x7f, and from the
/// backslashes a bit for each escaped byte, so that only the escapes
/// themselves are visited one by one. A string with a `\u` escape in it is
/// scanned again by [`scan_from`], which reads those.
pub(crate) fn scan_string(s: &[u8], start: usize) -> Option<Scanned> {
    scan_string_into(s, start, &mut ())
}

/// [`scan_string`], writing the string's text into `sink` on the way
/// (unless it gives up).
pub(crate) fn scan_string_into<S: Sink>(s: &[u8], start: usize, sink: &mut S) -> Option<Scanned> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (just checked).
        return unsafe { scan_avx2(s, start, sink) };
    }
    scan_blocks::<S, Baseline>(s, start, sink)
}

/// [`scan_blocks`] compiled for AVX2: the block masks in half the
/// instructions, and the loop around them free to use the wider registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2<S: Sink>(s: &[u8], start: usize, sink: &mut S) -> Option<Scanned> {
    scan_blocks::<S, Avx2>(s, start, sink)
}

/// How a block's masks are made.
trait Masks {
    fn masks64(block: &[u8; 64]) -> [u64; 4];
}

/// What every processor this is compiled for has (SSE2 on x86-64).
struct Baseline;

impl Masks for Baseline {
    #[inline(always)]
    fn masks64(block: &[u8; 64]) -> [u64; 4] {
        masks64(block)
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Masks for Avx2 {
    #[inline(always)]
    fn masks64(block: &[u8; 64]) -> [u64; 4] {
        // SAFETY: only used by `scan_avx2`, which runs on AVX2 processors.
        unsafe { masks64_avx2(block) }
    }
}

/// The scan of [`scan_string_into`], with `M`'s masks; inlined into each
/// caller so the AVX2 one is compiled with AVX2 throughout.
#[inline(always)]
fn scan_blocks<S: Sink, M: Masks>(s: &[u8], start: usize, sink: &mut S) -> Option<Scanned> {
    let mut scanned = Scanned {
        end: 0,
        compact: true,
        ascii: true,
        surrogate: false,
        nul: false,
    };
    let mut at = start;
    // Whether the block's first byte is escaped (by the last of the block
    // before).
    let mut carried = 0;
    while let Some(block) = s.get(at..at + 64) {
        let Ok(block) = <&[u8; 64]>::try_from(block) else {
            break;
        };
        let [quote, backslash, control, high] = M::masks64(block);
        let escaped = find_escaped(backslash, &mut carried);
        let ends = quote & !escaped;
        // The bytes before the closing quote (all of them without one).
        let inside = match ends {
            0 => u64::MAX,
            ends => (ends & ends.wrapping_neg()) - 1,
        };
        if control & inside != 0 {
            return None;
        }
        scanned.ascii &= high & inside == 0;
        let mut escapes = escaped & inside;
        let mut class = 0;
        // Where the bytes not yet written start.
        let mut from = 0;
        while escapes != 0 {
            let i = escapes.trailing_zeros() as usize;
            let byte = block[i];
            class |= ESCAPE_CLASS[byte as usize];
            if S::WRITES {
                // The backslash is at `i - 1`, or ended the block before.
                let backslash = i.saturating_sub(1);
                if backslash > from {
                    sink.copy(s, at + from, at + backslash);
                }
                sink.push(UNESCAPED[byte as usize]);
                from = i + 1;
            }
            escapes &= escapes - 1;
        }
        if class & (INVALID | UNICODE) != 0 {
            sink.give_up();
            return scan_from(s, start, scanned);
        }
        scanned.compact &= class & NOT_COMPACT == 0;
        if ends != 0 {
            let end = ends.trailing_zeros() as usize;
            if S::WRITES && end > from {
                sink.copy(s, at + from, at + end);
            }
            scanned.end = at + end;
            return Some(scanned);
        }
        if S::WRITES {
            // A backslash ending the block belongs to the next one's escape.
            let end = 64 - carried as usize;
            if end > from {
                sink.copy(s, at + from, at + end);
            }
        }
        at += 64;
    }
    // The rest, shorter than a block; an escape the last block began is
    // read whole from its backslash.
    sink.give_up();
    scan_from(s, at - carried as usize, scanned)
}

/// What the byte after a backslash makes of the escape.
const INVALID: u8 = 1;
const NOT_COMPACT: u8 = 2;
const UNICODE: u8 = 4;
static ESCAPE_CLASS: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    let valid = *b"\"\\bfnrt";
    while i < valid.len() {
        table[valid[i] as usize] = 0;
        i += 1;
    }
    table[b'/' as usize] = NOT_COMPACT;
    table[b'u' as usize] = UNICODE;
    table
};

/// The escaped bytes of a block: those after an odd run of backslashes.
/// `carried` says whether the block's first byte is escaped, and is set
/// for the next block. (simdjson's `find_escaped_branchless`.)
fn find_escaped(backslash: u64, carried: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash that is itself escaped starts nothing.
    let backslash = backslash & !*carried;
    let follows = (backslash << 1) | *carried;
    // Runs starting on an odd bit, added to themselves, carry out of the
    // run into the byte after it; those on an even bit are found by the
    // flip below.
    let odd_starts = backslash & !EVEN & !follows;
    let (sum, overflow) = odd_starts.overflowing_add(backslash);
    *carried = overflow as u64;
    let invert = sum << 1;
    (EVEN ^ invert) & follows
}

/// [`scan_string`] sixteen bytes at a time, from `at` on, escapes read one
/// by one (`\u` ones included); `scanned` holds what came before.
fn scan_from(s: &[u8], mut at: usize, mut scanned: Scanned) -> Option<Scanned> {
    loop {
        let (mut mask, high, whole) = match s.get(at..at + 16) {
            Some(chunk) => {
                let [quote, backslash, control, high] = specials(chunk);
                (quote | backslash | control, high, true)
            }
            None => {
                let [quote, backslash, control, high] = specials_bytes(s.get(at..)?);
                (quote | backslash | control, high, false)
            }
        };
        // Bytes after the closing quote count too: at worst the caller
        // checks UTF-8 it did not need to.
        scanned.ascii &= high == 0;
        loop {
            if mask == 0 {
                if !whole {
                    return None;
                }
                at += 16;
                break;
            }
            let special = at + mask.trailing_zeros() as usize;
            match s[special] {
                b'"' => {
                    scanned.end = special;
                    return Some(scanned);
                }
                b'\\' => {
                    let next = special + escape(s, special, &mut scanned)?;
                    if next >= at + 16 {
                        at = next;
                        break;
                    }
                    // Whatever the escape covered is no special byte.
                    mask &= u32::MAX << (next - at);
                }
                _ => return None,
            }
        }
    }
}

/// The length of the escape at `at` (a backslash), noting in `scanned`
/// what it says; `None` when JSON has no such escape.
fn escape(s: &[u8], at: usize, scanned: &mut Scanned) -> Option<usize> {
    let class = ESCAPE_CLASS[*s.get(at + 1)? as usize];
    if class & INVALID != 0 {
        return None;
    }
    scanned.compact &= class & NOT_COMPACT == 0;
    if class & UNICODE == 0 {
        return Some(2);
    }
    let hex = s.get(at + 2..at + 6)?;
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    scanned.surrogate |= hex[0].eq_ignore_ascii_case(&b'd')
        && matches!(hex[1].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f');
    scanned.nul |= hex == b"0000";
    scanned.compact &= escape_len(s, at).is_some();
    Some(6)
}

/// The text of a string [`scan_string`] found valid (its body, without the
/// quotes), escapes undone; `None` when it is not UTF-8, or holds a `\u`
/// escape of a surrogate (never lifted), or (which the scan rules out) is
/// not a valid string body. For the strings whose scan gave up
/// writing them (a `\u` escape, or the end of the input near): the rest are
/// written by their scan.
pub(crate) fn unescape(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    while let Some(k) = memchr::memchr(b'\\', &raw[at..]) {
        out.extend_from_slice(&raw[at..at + k]);
        at += k;
        match UNESCAPED[*raw.get(at + 1)? as usize] {
            0 if raw[at + 1] == b'u' => {
                let hex = std::str::from_utf8(raw.get(at + 2..at + 6)?).ok()?;
                let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                at += 6;
            }
            0 => return None,
            byte => {
                out.push(byte);
                at += 2;
            }
        }
    }
    out.extend_from_slice(&raw[at..]);
    String::from_utf8(out).ok()
}

/// What each two-byte escape stands for, by the byte after its backslash;
/// 0 for none (`\u` is read apart).
static UNESCAPED: [u8; 256] = {
    let mut table = [0; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// For the string whose body starts at `start`, with 64 bytes of `s` from
/// there: where it closes and whether it is ASCII, when its closing quote
/// comes in those 64 bytes with no backslash or control character before
/// it (most keys and ids); `None` otherwise (then [`scan_string`] tells).
/// One look at 64 bytes at once instead of a search and a check per byte.
#[inline]
pub(crate) fn plain_within_64(s: &[u8], start: usize) -> Option<(usize, bool)> {
    let block = <&[u8; 64]>::try_from(s.get(start..start.checked_add(64)?)?).ok()?;
    let [quote, backslash, control, high] = masks64(block);
    if quote == 0 {
        return None;
    }
    let inside = (quote & quote.wrapping_neg()) - 1;
    ((backslash | control) & inside == 0)
        .then(|| (start + quote.trailing_zeros() as usize, high & inside == 0))
}

/// For 64 bytes: quotes, backslashes, control characters and bytes above
/// 0x7f, a bit each.
fn masks64(block: &[u8]) -> [u64; 4] {
    let mut masks = [0u64; 4];
    for (i, chunk) in block.chunks_exact(16).take(4).enumerate() {
        for (mask, part) in masks.iter_mut().zip(specials(chunk)) {
            *mask |= u64::from(part) << (16 * i);
        }
    }
    masks
}

/// For up to 16 bytes: quotes, backslashes, control characters and bytes
/// above 0x7f, a bit each.
fn specials_bytes(chunk: &[u8]) -> [u32; 4] {
    let mut masks = [0; 4];
    for (i, &b) in chunk.iter().take(16).enumerate() {
        for (mask, hit) in masks
            .iter_mut()
            .zip([b == b'"', b == b'\\', b < 0x20, b > 0x7f])
        {
            *mask |= u32::from(hit) << i;
        }
    }
    masks
}

/// [`masks64`] in AVX2: 32 bytes a compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn masks64_avx2(block: &[u8; 64]) -> [u64; 4] {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_set1_epi8,
    };
    let half = |v: __m256i| {
        [
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8))),
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8))),
            // A byte at most 0x1f is its own minimum with 0x1f.
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(
                _mm256_min_epu8(v, _mm256_set1_epi8(0x1f)),
                v,
            )),
            _mm256_movemask_epi8(v),
        ]
        .map(|m| u64::from(m as u32))
    };
    // SAFETY: both loads read 32 bytes of the 64 in `block`, unaligned.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(block.as_ptr().cast::<__m256i>()),
            _mm256_loadu_si256(block.as_ptr().add(32).cast::<__m256i>()),
        )
    };
    let (lo, hi) = (half(lo), half(hi));
    [0, 1, 2, 3].map(|k| lo[k] | hi[k] << 32)
}

/// [`specials_bytes`] of exactly 16 bytes.
#[cfg(not(target_arch = "x86_64"))]
fn specials(chunk: &[u8]) -> [u32; 4] {
    specials_bytes(chunk)
}

/// [`specials_bytes`] of exactly 16 bytes, in a few SSE2 instructions
/// (SSE2 is part of every x86-64 processor).
#[cfg(target_arch = "x86_64")]
fn specials(chunk: &[u8]) -> [u32; 4] {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8,
    };
    if chunk.len() < 16 {
        return specials_bytes(chunk);
    }
    // SAFETY: SSE2 is in the x86-64 baseline this is compiled for, and the
    // load reads the first 16 bytes of `chunk` (checked above), unaligned.
    let masks = unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        [
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
            // A byte at most 0x1f is its own minimum with 0x1f.
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v)),
            _mm_movemask_epi8(v),
        ]
    };
    masks.map(|m| m as u32)
}

/// `text` repeated until it is longer than `len` bytes: a string past a
/// scanner user's length threshold, for its tests.
/// The length of the escape at `at` (a backslash), `None` when it is not
/// one serde_json writes.
pub(crate) fn escape_len(raw: &[u8], at: usize) -> Option<usize> {
    match *raw.get(at + 1)? {
        b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f' => Some(2),
        b'u' => {
            let hex = raw.get(at + 2..at + 6)?;
            let low = |c: u8| matches!(c, b'0'..=b'9' | b'a'..=b'f');
            let control =
                hex[0] == b'0' && hex[1] == b'0' && matches!(hex[2], b'0' | b'1') && low(hex[3]);
            // These five have a letter escape, which serde_json uses.
            let lettered = hex[2] == b'0' && matches!(hex[3], b'8' | b'9' | b'a' | b'c' | b'd');
            (control && !lettered).then_some(6)
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) fn repeated_past(text: &str, len: usize) -> String {
    text.repeat(len / text.len().max(1) + 2)
}

#[cfg(test)]
mod tests {
    /// The 64-byte look at a short string answers as the scan does, and
    /// only for a string without escapes or control characters.
    #[test]
    fn plain_within_64_answers_as_the_scan() {
        let mut rng = fastrand::Rng::with_seed(64);
        let alphabet = b"ab/u \"\\\n\x01\x7f\xc3\xa9";
        let mut answered = 0;
        for _ in 0..20_000 {
            let len = rng.usize(64..100);
            let s: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let Some((end, ascii)) = plain_within_64(&s, 0) else {
                continue;
            };
            answered += 1;
            let body = &s[..end];
            assert_eq!(s[end], b'"');
            assert!(body.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\'));
            assert_eq!(ascii, body.is_ascii());
            assert_eq!(scan_string(&s, 0).map(|scanned| scanned.end), Some(end));
        }
        assert!(answered > 1000, "{answered}");
    }

    use super::*;

    /// A string read a byte at a time: what the scanners must agree with.
    fn reference(s: &[u8]) -> Option<(usize, bool, bool)> {
        let mut i = 0;
        let (mut compact, mut surrogate) = (true, false);
        loop {
            match *s.get(i)? {
                b'"' => return Some((i, compact, surrogate)),
                b'\\' => match *s.get(i + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'/' => {
                        compact = false;
                        i += 2;
                    }
                    b'u' => {
                        let hex = std::str::from_utf8(s.get(i + 2..i + 6)?).ok()?;
                        let code = u16::from_str_radix(hex, 16).ok()?;
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return None;
                        }
                        surrogate |= (0xd800..0xe000).contains(&code);
                        compact &= escape_len(s, i).is_some();
                        i += 6;
                    }
                    _ => return None,
                },
                b if b < 0x20 => return None,
                _ => i += 1,
            }
        }
    }

    /// Every processor here runs the AVX2 scan when it can: the baseline
    /// masks are held to the same answers.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx2_masks_are_the_baseline_ones() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut rng = fastrand::Rng::with_seed(5);
        let alphabet = b"\"\\\x00\x1f\x20\x7f\x80\xffaz";
        for _ in 0..20_000 {
            let mut block = [0u8; 64];
            for b in &mut block {
                *b = match rng.u8(..4) {
                    0 => rng.u8(..),
                    _ => alphabet[rng.usize(..alphabet.len())],
                };
            }
            // SAFETY: the processor has AVX2 (checked above).
            let avx2 = unsafe { masks64_avx2(&block) };
            assert_eq!(avx2, masks64(&block), "{block:?}");
            assert_eq!(avx2, masks64_bytes(&block), "{block:?}");
        }
    }

    /// [`masks64`] a byte at a time.
    fn masks64_bytes(block: &[u8; 64]) -> [u64; 4] {
        let mut masks = [0u64; 4];
        for (i, chunk) in block.chunks_exact(16).enumerate() {
            for (mask, part) in masks.iter_mut().zip(specials_bytes(chunk)) {
                *mask |= u64::from(part) << (16 * i);
            }
        }
        masks
    }

    #[test]
    fn the_block_scanner_agrees_with_a_byte_at_a_time() {
        let pieces: [&[u8]; 12] = [
            b"a",
            b"\\",
            b"\"",
            b"n",
            b"u",
            b"0",
            b"d8",
            b"/",
            "\u{e9}".as_bytes(),
            b"\x01",
            b"    ",
            b"\\\\",
        ];
        let mut rng = fastrand::Rng::with_seed(11);
        let mut written = 0;
        for round in 0..200_000 {
            let mut s = Vec::new();
            let len = rng.usize(0..if round % 10 == 0 { 400 } else { 140 });
            while s.len() < len {
                // Mostly plain text, as tool output is.
                let piece = if rng.u8(..) < 200 {
                    &b"abcdefgh"[..]
                } else {
                    pieces[rng.usize(..pieces.len())]
                };
                s.extend_from_slice(piece);
            }
            if rng.bool() {
                s.push(b'"');
                s.extend_from_slice(b"tail\\\"");
            }
            let want = reference(&s);
            let got = scan_string(&s, 0);
            // Written on the way (with room after it for whole blocks), the
            // text is the one serde_json reads, unless the scan gave up.
            let mut text = Text {
                bytes: Vec::new(),
                whole: true,
            };
            let padded = [&s[..], &[b' '; 64]].concat();
            let scanned = scan_string_into(&padded, 0, &mut text);
            if let (Some(scanned), Some((end, ..))) = (&scanned, want) {
                assert_eq!(scanned.end, end);
                let quoted = [&b"\""[..], &s[..end], b"\""].concat();
                let read = serde_json::from_slice::<String>(&quoted);
                // The fallback for texts a scan gave up on agrees too (it
                // is never handed a surrogate: those are not lifted).
                if !scanned.surrogate {
                    assert_eq!(unescape(&s[..end]), read.as_ref().ok().cloned());
                }
                if let (true, Ok(want)) = (text.whole, read) {
                    assert_eq!(
                        text.bytes,
                        want.as_bytes(),
                        "{:?}",
                        String::from_utf8_lossy(&s)
                    );
                    written += 1;
                }
            }
            assert_eq!(
                got.as_ref().map(|r| (r.end, r.compact, r.surrogate)),
                want,
                "{:?}",
                String::from_utf8_lossy(&s)
            );
            if let (Some(got), Some((end, ..))) = (got, want)
                && !s[..end].is_ascii()
            {
                assert!(!got.ascii, "{:?}", String::from_utf8_lossy(&s));
            }
        }
        assert!(written > 10_000, "{written}");
    }

    #[test]
    fn strings_are_scanned_as_json_reads_them() {
        let scan = |s: &str| scan_string(s.as_bytes(), 0).map(|r| (r.end, r.compact, r.ascii));
        let pad = "a".repeat(40);
        assert_eq!(scan("\""), Some((0, true, true)));
        assert_eq!(scan(&format!("{pad}\"")), Some((40, true, true)));
        assert_eq!(
            scan(&format!("{pad}\\\"{pad}\\n\"")),
            Some((84, true, true))
        );
        assert_eq!(scan(&format!("{pad}é\"")), Some((42, true, false)));
        assert_eq!(scan(&format!("{pad}\\/\"")), Some((42, false, true)));
        assert_eq!(
            scan(&format!("{pad}\\u001f\\u00e9\"")),
            Some((52, false, true))
        );
        assert_eq!(scan(&format!("{pad}\\u001f\"")), Some((46, true, true)));
        assert_eq!(scan(&format!("{pad}\\\\\"")), Some((42, true, true)));
        assert_eq!(scan(&format!("{pad}\u{7f}\"")), Some((41, true, true)));
        for bad in ["\u{1f}\"", "\\x\"", "\\u12\"", "\\u12g4\"", "abc", "\\"] {
            assert_eq!(scan(&format!("{pad}{bad}")), None, "{bad:?}");
            assert_eq!(scan(bad), None, "{bad:?}");
        }
        let surrogate = scan_string(format!("{pad}\\uDbff\"").as_bytes(), 0);
        assert!(surrogate.is_some_and(|s| s.surrogate));
        // Every position of the special byte within a vector and after it.
        for n in 0..40 {
            let s = format!("{}\"", "b".repeat(n));
            assert_eq!(scan(&s), Some((n, true, true)), "{n}");
        }
    }
}
