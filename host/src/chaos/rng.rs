//! A small deterministic PRNG (SplitMix64): schedules and workloads are drawn from it, so a
//! seed and a schedule index always give the same faults, restarts and writes.

/// SplitMix64: fast, well mixed, and stable across platforms and releases.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from several numbers (a seed and a schedule index, say).
    pub fn from_parts(parts: &[u64]) -> Self {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for part in parts {
            rng.0 ^= part.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            rng.next_u64();
        }
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.next_u64() as usize % items.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_parts_give_the_same_numbers_and_others_differ() {
        let draw = |parts: &[u64]| {
            let mut rng = Rng::from_parts(parts);
            (0..4).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(&[1, 2]), draw(&[1, 2]));
        assert_ne!(draw(&[1, 2]), draw(&[1, 3]));
        assert_ne!(draw(&[1, 2]), draw(&[2, 1]));
        let mut rng = Rng::from_parts(&[7]);
        assert!((0..1000).all(|_| (3..=5).contains(&rng.range(3, 5))));
        assert!((0..1000).all(|_| (0.0..1.0).contains(&rng.unit())));
    }
}
