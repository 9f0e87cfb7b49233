//! Histograms of durations in the kernel's log2 buckets, kept per series between ticks.

/// A log2 histogram as the kernel keeps it: `buckets[b]` counts values in [2^(b-1), 2^b) ns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    pub buckets: Vec<u64>,
    pub sum_ns: u64,
}

impl Log2Histogram {
    pub fn add(&mut self, bucket: usize, count: u64) {
        if self.buckets.len() <= bucket {
            self.buckets.resize(bucket + 1, 0);
        }
        self.buckets[bucket] += count;
    }

    /// Adds one value of `value_ns` to its bucket and to the sum.
    pub fn observe(&mut self, value_ns: u64) {
        self.add(log2_bucket(value_ns), 1);
        self.sum_ns = self.sum_ns.saturating_add(value_ns);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Values below 2^bucket ns: every bucket up to and including `bucket`.
    pub fn cumulative_below(&self, bucket: usize) -> u64 {
        self.buckets.iter().take(bucket + 1).sum()
    }
}

/// Bucket of a value in a `Log2Histogram`: 0 for 0, else 1 + floor(log2(value)).
pub fn log2_bucket(value: u64) -> usize {
    (u64::BITS - value.leading_zeros()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_match_the_kernels() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 1);
        assert_eq!(log2_bucket(1023), 10);
        assert_eq!(log2_bucket(1024), 11);
    }
}
