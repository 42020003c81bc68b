//! A worker's own counters (memcached's per-thread stats): incremented on the request path,
//! published once per loop turn, summed for `stats`.

/// Declares [`WorkerCounters`] and its list of fields in one place, so adding, subtracting and
/// listing a counter cannot miss one.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// A worker's own counters (memcached's per-thread stats), published once per loop turn.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct WorkerCounters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl WorkerCounters {
            /// Every counter's name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Every counter, in the order of [`WorkerCounters::NAMES`].
            pub fn values(&self) -> Vec<u64> {
                vec![$(self.$name),*]
            }

            /// Every counter, mutably, in the order of [`WorkerCounters::NAMES`].
            pub fn values_mut(&mut self) -> Vec<&mut u64> {
                vec![$(&mut self.$name),*]
            }

            /// Combines each counter with the same one of `other`.
            fn combine(&mut self, other: &WorkerCounters, f: impl Fn(u64, u64) -> u64) {
                $(self.$name = f(self.$name, other.$name);)*
            }
        }
    };
}

counters! {
    /// get/gets/gat/gats/mg keys.
    cmd_get,
    /// Storage commands.
    cmd_set,
    /// flush_all.
    cmd_flush,
    /// touch and gat/gats keys.
    cmd_touch,
    /// Meta commands.
    meta_cmds,
    /// Bytes read from clients.
    bytes_read,
    /// Bytes written to clients.
    bytes_written,
    /// Reads of other workers' partitions served here (CREW), per outcome.
    remote_get_hits,
    /// As above, misses.
    remote_get_misses,
    /// Requests handed to another worker.
    forwarded,
    /// Gets of other workers' keys answered from the front cache (`-o front_cache`).
    front_hits,
    /// Batches of requests handed to another worker (one per destination per loop turn).
    forward_batches,
    /// Sleeping workers woken to run handed-over requests or take their replies.
    wakeups,
    /// Requests executed for another worker.
    executed_for_others,
    /// Connections closed for misbehaving (over-long lines, unread output).
    conns_dropped,
    /// Native protocol: datagrams received on the partitions' ports.
    native_datagrams_in,
    /// Native protocol: datagrams sent.
    native_datagrams_out,
    /// Native protocol: requests answered (any status).
    native_requests,
    /// Native protocol: requests for a partition another worker owns (stale directories).
    native_redirects,
    /// Native protocol: malformed requests, and datagrams that were not the protocol's.
    native_bad,
    /// Native protocol: retransmitted incr/decr answered from the de-duplication table.
    native_duplicates,
    /// Native protocol: reply datagrams dropped because the socket's send buffer was full.
    native_replies_dropped,
    /// Times a connection was set aside after -R requests so others could run.
    conn_yields,
    /// Connections closed by -o idle_timeout.
    idle_kicks,
    /// Authentication attempts (SASL, ASCII auth).
    auth_cmds,
    /// Failed authentication attempts.
    auth_errors,
    /// CREW reads of other workers' partitions that found an expired item.
    remote_get_expired,
    /// CREW reads of other workers' partitions that found a flushed item.
    remote_get_flushed,
    /// Stores refused as larger than -I before reaching a partition.
    store_too_large,
    /// Stores refused because the client memory budget had no room for their values.
    store_no_memory,
    /// Connections closed for want of a read buffer under -o read_buf_mem_limit.
    read_buf_oom,
    /// Connections closed for want of reply memory under -o read_buf_mem_limit.
    response_obj_oom,
}

impl WorkerCounters {
    /// What accrued since `base` (an earlier reading of the same counters).
    pub fn since(&self, base: &WorkerCounters) -> WorkerCounters {
        let mut since = *self;
        since.combine(base, u64::saturating_sub);
        since
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &WorkerCounters) {
        self.combine(other, u64::wrapping_add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each counter set to a value of its own.
    fn numbered(base: u64) -> WorkerCounters {
        let mut counters = WorkerCounters::default();
        for (index, value) in counters.values_mut().into_iter().enumerate() {
            *value = base + index as u64;
        }
        counters
    }

    #[test]
    fn adding_and_subtracting_keep_every_counter() {
        let mut total = numbered(1000);
        total.add(&numbered(10));
        for (index, value) in total.values().into_iter().enumerate() {
            assert_eq!(value, 1010 + 2 * index as u64, "{}", WorkerCounters::NAMES[index]);
        }
        assert_eq!(total.since(&numbered(10)), numbered(1000));
        assert_eq!(WorkerCounters::NAMES.len(), total.values().len());
    }
}
