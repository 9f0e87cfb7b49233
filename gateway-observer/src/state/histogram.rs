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
        self.add(crate::state::requests::stats::log2_bucket(value_ns), 1);
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
