//! A gzip bomb built bit by bit, in no time: one deflate block with a
//! dynamic Huffman code in which a match of 258 bytes at distance 1 costs
//! two bits, so `len` bytes of `byte` take `len / 1032` bytes (1 GiB in
//! 1 MiB, the ratio of the bombs found in the wild). The CRC in its trailer
//! is not computed (zero): a bomb is hostile input, and nothing that reads
//! one should get that far. Include it with `#[path =
//! "common/gzip_bomb.rs"] mod gzip_bomb;`.
#![allow(dead_code)]

/// Bits written least significant first, as deflate packs them.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    /// `count` bits of `value`, low bit first (header fields, extra bits).
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code of `len` bits, most significant bit first.
    fn code(&mut self, code: u64, len: u32) {
        for i in (0..len).rev() {
            self.put((code >> i) & 1, 1);
        }
    }
}

/// gzip of `len` bytes (at least 259), every one `byte`.
pub fn gzip_bomb(byte: u8, len: u64) -> Vec<u8> {
    let mut b = Bits {
        out: vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff],
        acc: 0,
        n: 0,
    };
    // Final block, dynamic Huffman; 286 literal/length codes, 2 distance
    // codes, 18 code-length codes.
    b.put(1, 1);
    b.put(2, 2);
    b.put(286 - 257, 5);
    b.put(2 - 1, 5);
    b.put(18 - 4, 4);
    // Code-length code: symbol 0 one bit ("0"), symbols 1 and 2 two bits
    // ("10", "11"), given in deflate's order 16 17 18 0 8 7 9 6 10 5 11 4
    // 12 3 13 2 14 1.
    for len in [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2] {
        b.put(len, 3);
    }
    let length_code = |b: &mut Bits, len: u8| match len {
        0 => b.code(0b0, 1),
        1 => b.code(0b10, 2),
        _ => b.code(0b11, 2),
    };
    // Literal/length code: 285 (a 258-byte match) one bit ("0"), the
    // literal `byte` and end-of-block two bits ("10", "11": canonical
    // order, by symbol). Distance code: 0 and 1, one bit each.
    for symbol in 0..286u16 {
        let len = match symbol {
            285 => 1,
            256 => 2,
            s if s == u16::from(byte) => 2,
            _ => 0,
        };
        length_code(&mut b, len);
    }
    length_code(&mut b, 1);
    length_code(&mut b, 1);
    // The byte once, then matches of 258 at distance 1 copying it.
    b.code(0b10, 2);
    let matches = (len - 1) / 258;
    for _ in 0..matches {
        b.code(0, 1);
        b.code(0, 1);
    }
    // The rest as literals, then end of block.
    for _ in 0..(len - 1) % 258 {
        b.code(0b10, 2);
    }
    b.code(0b11, 2);
    if b.n > 0 {
        b.put(0, 8 - b.n);
    }
    // CRC32 (not computed) and the length mod 2^32.
    b.out.extend_from_slice(&[0, 0, 0, 0]);
    b.out.extend_from_slice(&(len as u32).to_le_bytes());
    b.out
}
