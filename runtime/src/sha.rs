//! SHA-256 over many small pieces: they are gathered in a few blocks on the stack and
//! compressed when those fill (or at the end), straight from the input when it is long.
//!
//! `sha2::Sha256` keeps one block and pays a fixed cost per `update` (a branch on its fill, a
//! copy call, a bounds check on the block). An id hashes five to ten pieces of a few bytes, the
//! content hash's encoding arrives as tags, lengths and short names; gathered, that cost is
//! paid once per buffer. This computes the same function (tested against `sha2` below); only
//! the driving of `sha2::compress256` is ours.

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
const H0: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256 gathering `BLOCKS` blocks of input before it compresses them. Ids take two: a
/// typical id (under 120 bytes of message) is compressed once, at the end. The blocks come
/// first, on cache lines of their own: `id()` measured 1.09-1.14x its floor unaligned, 1.03-1.09x
/// aligned (six alternating runs of each).
#[derive(Clone)]
#[repr(C, align(64))]
pub(crate) struct Sha256<const BLOCKS: usize = 2> {
    blocks: [[u8; 64]; BLOCKS],
    state: [u32; 8],
    /// Bytes held in `blocks`.
    len: usize,
    /// Bytes already compressed (a multiple of 64).
    done: u64,
}

impl<const BLOCKS: usize> Sha256<BLOCKS> {
    const BUF: usize = 64 * BLOCKS;

    /// A hasher that has been fed `pieces`, one after another, built at compile time (shorter
    /// together than the buffer).
    pub(crate) const fn with_prefix(pieces: &[&[u8]]) -> Self {
        let mut blocks = [[0u8; 64]; BLOCKS];
        let mut len = 0;
        let mut p = 0;
        while p < pieces.len() {
            let piece = pieces[p];
            let mut i = 0;
            while i < piece.len() {
                blocks[len / 64][len % 64] = piece[i];
                len += 1;
                i += 1;
            }
            p += 1;
        }
        assert!(len < Self::BUF, "a prefix shorter than the buffer");
        Sha256 {
            state: H0,
            blocks,
            len,
            done: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn update(&mut self, data: &[u8]) {
        let n = self.len;
        if data.len() <= Self::BUF - n {
            self.blocks.as_flattened_mut()[n..n + data.len()].copy_from_slice(data);
            self.len = n + data.len();
        } else {
            self.spill(data);
        }
    }

    /// Feeds `tag`, `len` (big-endian bytes), then `data` — the id scheme's field layout (a
    /// `u32` length) and the content encoding's (a `u64`) — with the head written straight into
    /// the buffer: built on the stack first, a head cost a store-forwarding stall per piece.
    #[inline(always)]
    pub(crate) fn update_field<const N: usize>(&mut self, tag: u8, len: [u8; N], data: &[u8]) {
        let n = self.len;
        if 1 + N + data.len() <= Self::BUF - n {
            let buf = self.blocks.as_flattened_mut();
            buf[n] = tag;
            buf[n + 1..n + 1 + N].copy_from_slice(&len);
            buf[n + 1 + N..n + 1 + N + data.len()].copy_from_slice(data);
            self.len = n + 1 + N + data.len();
        } else {
            self.update(&[tag]);
            self.update(&len);
            self.update(data);
        }
    }

    /// Input that does not fit: fill and compress the buffer, compress the input's whole
    /// blocks where they are, and keep the rest.
    #[inline(never)]
    fn spill(&mut self, data: &[u8]) {
        let (head, data) = data.split_at(Self::BUF - self.len);
        self.blocks.as_flattened_mut()[self.len..].copy_from_slice(head);
        sha2::block_api::compress256(&mut self.state, &self.blocks);
        let whole = data.len() - data.len() % 64;
        compress(&mut self.state, &data[..whole]);
        self.done += (Self::BUF + whole) as u64;
        let rest = &data[whole..];
        self.blocks.as_flattened_mut()[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }

    /// The digest. Takes `&mut self` (and leaves it spent) so that the state is not moved.
    #[inline(always)]
    pub(crate) fn finish(&mut self) -> [u8; 32] {
        let bits = (self.done + self.len as u64).wrapping_mul(8).to_be_bytes();
        let n = self.len;
        let end = (n + 9).div_ceil(64) * 64;
        let buf = self.blocks.as_flattened_mut();
        if end <= buf.len() {
            buf[n] = 0x80;
            buf[n + 1..end - 8].fill(0);
            buf[end - 8..end].copy_from_slice(&bits);
            compress(&mut self.state, &buf[..end]);
        } else {
            // The buffer is (nearly) full: it goes out whole, the length in one more block.
            let mut last = [0u8; 64];
            match buf.get_mut(n) {
                Some(b) => *b = 0x80,
                None => last[0] = 0x80,
            }
            let from = (n + 1).min(buf.len());
            buf[from..].fill(0);
            compress(&mut self.state, buf);
            last[56..].copy_from_slice(&bits);
            compress(&mut self.state, &last);
        }
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(&self.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// Compresses whole blocks (`blocks.len()` a multiple of 64), where they are: sha2 0.11 takes
/// its blocks as `[u8; 64]`, so a long input is one call and no copy (with 0.10's typed blocks,
/// a copy into groups of 16 cost ~3% of `content_hash()` at 4 KB).
#[inline]
fn compress(state: &mut [u32; 8], blocks: &[u8]) {
    let (whole, rest) = blocks.as_chunks::<64>();
    debug_assert!(rest.is_empty());
    sha2::block_api::compress256(state, whole);
}

/// Writes the lowercase hex digits of `bytes` into `out` (twice as long): bytes, not `char`s,
/// each of which would cost a UTF-8 encoding.
#[inline]
pub(crate) fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (b, o) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        o.copy_from_slice(&[DIGITS[(b >> 4) as usize], DIGITS[(b & 15) as usize]]);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sha2::Digest;

    use super::*;

    fn both<const B: usize>(prefix: &[u8], pieces: &[Vec<u8>]) -> ([u8; 32], [u8; 32]) {
        let mut ours = Sha256::<B>::with_prefix(&[]);
        ours.update(prefix);
        let mut theirs = sha2::Sha256::new();
        theirs.update(prefix);
        for p in pieces {
            ours.update(p);
            theirs.update(p);
        }
        (ours.finish(), theirs.finalize().into())
    }

    proptest! {
        /// Any message, in any pieces, after any prefix, for one to four blocks of buffer:
        /// the digest `sha2` gives. Pieces reach past two groups of `compress` (2 KiB).
        #[test]
        fn equals_sha2(
            prefix in prop::collection::vec(any::<u8>(), 0..300),
            pieces in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..2300), 0..8),
        ) {
            let (a, b) = both::<1>(&prefix, &pieces);
            prop_assert_eq!(a, b);
            let (a, b) = both::<2>(&prefix, &pieces);
            prop_assert_eq!(a, b);
            let (a, b) = both::<4>(&prefix, &pieces);
            prop_assert_eq!(a, b);
        }

        /// The id layout written in one call equals its bytes fed one by one.
        #[test]
        fn update_field_is_its_bytes(
            prefix in prop::collection::vec(any::<u8>(), 0..127),
            tag: u8,
            data in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut ours = Sha256::<2>::with_prefix(&[&prefix]);
            ours.update_field(tag, (data.len() as u32).to_be_bytes(), &data);
            let mut theirs = sha2::Sha256::new();
            theirs.update(&prefix);
            theirs.update([tag]);
            theirs.update((data.len() as u32).to_be_bytes());
            theirs.update(&data);
            prop_assert_eq!(ours.finish(), <[u8; 32]>::from(theirs.finalize()));
        }
    }

    /// Every message length around the block and buffer edges, in one piece, and as a
    /// compile-time prefix followed by single bytes.
    #[test]
    fn every_length_to_three_buffers() {
        const BUF: usize = Sha256::<2>::BUF;
        let data: Vec<u8> = (0..3 * BUF + 1).map(|i| (i * 7 + 3) as u8).collect();
        for n in 0..data.len() {
            let want = <[u8; 32]>::from(sha2::Sha256::digest(&data[..n]));
            let mut whole = Sha256::<2>::with_prefix(&[]);
            whole.update(&data[..n]);
            assert_eq!(whole.finish(), want, "length {n}, one piece");
            let split = n.min(BUF - 1);
            let mut bytes = Sha256::<2>::with_prefix(&[&data[..split]]);
            for b in &data[split..n] {
                bytes.update(std::slice::from_ref(b));
            }
            assert_eq!(bytes.finish(), want, "length {n}, a prefix then bytes");
        }
    }
}
