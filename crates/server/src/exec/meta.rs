//! memcached's meta commands (mg, ms, md, ma, me) on the partitions.

use super::*;

impl Engine {
    pub(super) fn meta(&mut self, meta: &Meta<'_>, at: Option<Located>, out: &mut Vec<u8>) -> Exec {
        if meta.too_large(&self.limits) {
            // The worker answers these before they run (worker/turn.rs, `oversized`); the same
            // rule here, counting the meta command.
            self.refuse_too_large(TooLarge::Meta, meta.key(), true);
            out.extend_from_slice(reply::TOO_LARGE);
            return Exec::Done;
        }
        self.counters.meta_cmds += 1;
        let key = self.key(meta.key(), at);
        match meta.command {
            MetaCommand::Get => return self.meta_get(meta, key, out),
            MetaCommand::Set => self.meta_set(meta, key, out),
            MetaCommand::Delete => self.meta_delete(meta, key, out),
            MetaCommand::Arith => self.meta_arith(meta, key, out),
            MetaCommand::Debug => self.meta_debug(meta, key, out),
        }
        Exec::Done
    }

    pub(super) fn meta_item(&self, hit: &qs_store::Hit) -> MetaItem {
        MetaItem {
            cas: self.cas_out(hit.cas),
            flags: hit.flags,
            value_len: hit.value_len,
            ttl_secs: ttl_secs(hit.expiry, self.now_secs),
            idle_secs: self.now_secs.saturating_sub(hit.last_access_secs),
            fetched_before: hit.fetched_before,
        }
    }

    /// The expiry a meta request's flags give an item: memcached applies N (only to an item
    /// this request `created`) and T in the order the request lists them, starting from
    /// `start`. With `until_t`, the expiry as it stands where the `t` flag is (what `t` reports).
    pub(super) fn expiry_in_flag_order(
        &self,
        meta: &Meta<'_>,
        start: Expiry,
        created: bool,
        until_t: bool,
    ) -> Expiry {
        let options = &meta.options;
        let mut expiry = start;
        for token in meta.flag_tokens() {
            match token[0] {
                b'N' if created => expiry = options.vivify.map_or(expiry, |ttl| self.expiry(ttl)),
                b'T' => expiry = options.ttl.map_or(expiry, |ttl| self.expiry(ttl)),
                b't' if until_t => return expiry,
                _ => {}
            }
        }
        expiry
    }

    pub(super) fn meta_get(&mut self, meta: &Meta<'_>, key: Key<'_>, out: &mut Vec<u8>) -> Exec {
        let options = &meta.options;
        let (hash, partition) = (key.hash, key.partition);
        let owned = self.partitions[partition].is_some();
        self.counters.cmd_get += 1;
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let outcome = if owned {
            let touch = options.ttl.map(|ttl| self.expiry(ttl));
            // An item created on a miss ends with the expiry its N and T leave in request order.
            let vivify = options.vivify.map(|_| self.expiry_in_flag_order(meta, Expiry::NEVER, true, false));
            let recache_below_secs = options.recache.map(|secs| secs.max(0) as u32);
            if touch.is_some() {
                self.counters.cmd_touch += 1;
            }
            let letters = || meta.flag_tokens().map(|token| token[0]);
            let recache_before_touch = options.recache.is_some()
                && letters().position(|l| l == b'R') < letters().position(|l| l == b'T');
            let no_update = options.has(b'u');
            let options = MetaGet { touch, vivify, recache_below_secs, recache_before_touch, no_update };
            self.run(key, Command::MetaGet(options), &mut value)
        } else {
            self.read_remote(hash, partition, &key, &mut value)
        };
        // The win token is the owner's to hand out, and the first fetch marks the item fetched
        // (meta `h`): both are writes, so the owner serves them (and shows the key to `stats
        // hotkeys` and `stats mrc` then, once).
        let for_owner =
            |hit: &qs_store::Hit| (hit.stale && !hit.win_sent) || (!hit.fetched_before && !options.has(b'u'));
        if !owned {
            if let Outcome::Hit(hit) = &outcome {
                if for_owner(hit) {
                    self.scratch = value;
                    return Exec::Forward(self.owner(partition));
                }
            }
            self.offer(hash, &key, &Command::Get);
        }
        let (item, data, won, stale, win_sent) = match outcome {
            Outcome::Hit(hit) => {
                let data = hit.value_start..hit.value_start + hit.value_len;
                let mut item = self.meta_item(&hit);
                if options.has(b't') && options.ttl.is_some() {
                    // `t` before `T` reads the expiry before the touch.
                    let shown = self.expiry_in_flag_order(meta, hit.expiry_before, false, true);
                    item.ttl_secs = ttl_secs(shown, self.now_secs);
                }
                (item, data, hit.won, hit.stale, hit.win_sent)
            }
            Outcome::Vivified { cas } => {
                if let Some(chosen) = options.cas_in {
                    self.choose_cas(key, Some(cas), chosen);
                }
                let shown = self.expiry_in_flag_order(meta, Expiry::NEVER, true, true);
                let ttl_secs = ttl_secs(shown, self.now_secs);
                (
                    MetaItem { cas: self.cas_out(cas), ttl_secs, ..MetaItem::default() },
                    0..0,
                    true,
                    false,
                    false,
                )
            }
            _ => {
                if self.shared.watchers.wants(watch::FETCHERS) {
                    self.log_get(&key, None);
                }
                if !options.quiet() {
                    // A miss reflects only the request's key (k) and opaque (O).
                    out.extend_from_slice(b"EN");
                    reply::meta_flags(out, meta, None, b"");
                    out.extend_from_slice(b"\r\n");
                }
                self.scratch = value;
                return Exec::Done;
            }
        };
        if self.shared.watchers.wants(watch::FETCHERS) {
            self.log_get(&key, Some(item.value_len));
        }
        // memcached 1.6.40: a `C` that matches the item's CAS means the client has this
        // version already, so the value is not sent.
        let with_value = options.has(b'v') && options.cas != Some(item.cas);
        if with_value {
            out.extend_from_slice(b"VA ");
            reply::push_u64(out, item.value_len as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        reply::meta_flags(out, meta, Some(&item), b"cfstlh");
        if win_sent {
            out.extend_from_slice(b" Z");
        }
        if stale {
            out.extend_from_slice(b" X");
        }
        if won {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if with_value {
            out.extend_from_slice(&value[data]);
            out.extend_from_slice(b"\r\n");
        }
        self.scratch = value;
        Exec::Done
    }

    pub(super) fn meta_set(&mut self, meta: &Meta<'_>, key: Key<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        self.counters.cmd_set += 1;
        let mut mode = match options.mode {
            Some(b'E') => qs_store::StoreMode::Add,
            Some(b'A') => qs_store::StoreMode::Append,
            Some(b'P') => qs_store::StoreMode::Prepend,
            Some(b'R') => qs_store::StoreMode::Replace,
            _ => qs_store::StoreMode::Set,
        };
        if let Some(cas) = options.cas {
            // As memcached: set and replace compare the CAS (with I, an older one stores the
            // value marked stale), append and prepend compare a nonzero one, add ignores it.
            mode = match mode {
                // C0 never matches, and is no older version either: memcached answers EX.
                qs_store::StoreMode::Set | qs_store::StoreMode::Replace if options.has(b'I') && cas != 0 => {
                    qs_store::StoreMode::CasOrStale(cas)
                }
                qs_store::StoreMode::Set | qs_store::StoreMode::Replace => qs_store::StoreMode::Cas(cas),
                qs_store::StoreMode::Append if cas != 0 => qs_store::StoreMode::AppendCas(cas),
                qs_store::StoreMode::Prepend if cas != 0 => qs_store::StoreMode::PrependCas(cas),
                other => other,
            };
        }
        let mode = self.mode_expected(key, mode);
        let expiry = self.expiry(options.ttl.unwrap_or(0));
        let command = Command::Store { mode, value: meta.data, flags: options.client_flags, expiry };
        self.log_lookup(&key);
        let mut outcome = self.run(key, command, &mut Vec::new());
        let appending = matches!(
            mode,
            qs_store::StoreMode::Append
                | qs_store::StoreMode::Prepend
                | qs_store::StoreMode::AppendCas(_)
                | qs_store::StoreMode::PrependCas(_)
        );
        let mut expiry = expiry;
        if let (true, Some(ttl), Outcome::NotStored) = (appending, options.vivify, outcome) {
            // memcached 1.6.20: append and prepend with N create a missing item, with N's TTL.
            expiry = self.expiry(ttl);
            let command = Command::Store {
                mode: qs_store::StoreMode::Add,
                value: meta.data,
                flags: options.client_flags,
                expiry,
            };
            outcome = self.run(key, command, &mut Vec::new());
        }
        self.log_store(&key, &outcome, mode, expiry, meta.data.len());
        let (code, cas) = match outcome {
            Outcome::Stored { cas } => ("HD", cas),
            Outcome::NotStored => ("NS", 0),
            Outcome::Exists => ("EX", 0),
            Outcome::NotFound => ("NF", 0),
            Outcome::TooLarge | Outcome::OutOfMemory => {
                self.drop_refused(&key);
                let refusal =
                    if outcome == Outcome::TooLarge { reply::TOO_LARGE } else { reply::OUT_OF_MEMORY };
                out.extend_from_slice(refusal);
                return;
            }
            _ => {
                out.extend_from_slice(reply::BAD_FORMAT);
                return;
            }
        };
        if let (Some(chosen), "HD") = (options.cas_in, code) {
            self.choose_cas(key, Some(cas), chosen);
        }
        if code == "HD" && options.quiet() {
            return;
        }
        out.extend_from_slice(code.as_bytes());
        // `s` (memcached 1.6.21): the item's size once stored, appended data included.
        let mut value_len = meta.data.len();
        if appending && code == "HD" && options.has(b's') {
            if let Some((len, _)) = self.look(key) {
                value_len = len;
            }
        }
        let item = MetaItem { cas: self.cas_out(cas), value_len, ..MetaItem::default() };
        reply::meta_flags(out, meta, Some(&item), b"cs");
        out.extend_from_slice(b"\r\n");
    }

    pub(super) fn meta_delete(&mut self, meta: &Meta<'_>, key: Key<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        // memcached's md compares any C, C0 included (no item has CAS 0, so it answers EX);
        // to the store a CAS of 0 means "unconditional", so C0 becomes one no item can have.
        let cas = options.cas.map_or(0, |cas| if cas == 0 { u64::MAX } else { self.cas_expected(key, cas) });
        // An invalidation (I) leaves the item: no deletion to log.
        let logged_as = (!options.has(b'I')).then_some("md");
        if options.has(b'x') {
            // The version keeps the CAS the client saw (memcached keeps the item's).
            let seen = self.look(key).map_or(0, |(_, cas)| self.cas_out(cas));
            // memcached 1.6.27: x drops the value and keeps the item, with the request's flags
            // and TTL (none given: 0 and none); with I it is then marked stale as below.
            let outcome = self.delete(key, cas, logged_as);
            if outcome == Outcome::Deleted {
                let expiry = self.expiry(options.ttl.unwrap_or(0));
                let command = Command::Store {
                    mode: qs_store::StoreMode::Add,
                    value: b"",
                    flags: options.client_flags,
                    expiry,
                };
                if let Outcome::Stored { cas: own } = self.run(key, command, &mut Vec::new()) {
                    self.choose_cas(key, Some(own), options.cas_in.unwrap_or(seen));
                }
                if options.has(b'I') {
                    self.run(key, Command::Invalidate { cas: 0 }, &mut Vec::new());
                    if let Some(chosen) = options.cas_in {
                        self.choose_cas(key, None, chosen);
                    }
                }
            }
            return self.meta_delete_reply(meta, outcome, out);
        }
        let outcome = if options.has(b'I') {
            self.log_lookup(&key);
            let outcome = self.run(key, Command::Invalidate { cas }, &mut Vec::new());
            if let (Outcome::Deleted, Some(ttl)) = (outcome, options.ttl) {
                let expiry = self.expiry(ttl);
                self.run(key, Command::SetExpiry { expiry }, &mut Vec::new());
            }
            if let (Outcome::Deleted, Some(chosen)) = (outcome, options.cas_in) {
                self.choose_cas(key, None, chosen);
            }
            outcome
        } else {
            self.delete(key, cas, logged_as)
        };
        self.meta_delete_reply(meta, outcome, out);
    }

    fn meta_delete_reply(&mut self, meta: &Meta<'_>, outcome: Outcome, out: &mut Vec<u8>) {
        let code: &[u8] = match outcome {
            Outcome::Deleted if meta.options.quiet() => return,
            Outcome::Deleted => b"HD",
            Outcome::Exists => b"EX",
            _ => b"NF",
        };
        out.extend_from_slice(code);
        reply::meta_flags(out, meta, None, b"");
        out.extend_from_slice(b"\r\n");
    }

    pub(super) fn meta_arith(&mut self, meta: &Meta<'_>, key: Key<'_>, out: &mut Vec<u8>) {
        let options = &meta.options;
        // C0 compares nothing here (memcached's ma ignores it).
        let cas = options.cas.unwrap_or(0);
        let create = options
            .vivify
            .map(|_| (options.initial, self.expiry_in_flag_order(meta, Expiry::NEVER, true, false)));
        let (outcome, created) = self.arith(key, (options.delta, meta.decrement()), cas, create);
        if created == super::update::Created::NoMemory {
            out.extend_from_slice(b"SERVER_ERROR Out of memory allocating new item\r\n");
            return;
        }
        let created = created == super::update::Created::Yes;
        let (value, cas, expiry) = match outcome {
            Outcome::Counter { value, cas, expiry } => (value, cas, expiry),
            Outcome::NonNumeric => {
                out.extend_from_slice(reply::NON_NUMERIC);
                return;
            }
            Outcome::OutOfMemory => {
                out.extend_from_slice(reply::ARITH_OUT_OF_MEMORY);
                return;
            }
            other => {
                out.extend_from_slice(match other {
                    Outcome::Exists => b"EX",
                    Outcome::NotStored => b"NS",
                    _ => b"NF",
                });
                reply::meta_flags(out, meta, None, b"");
                out.extend_from_slice(b"\r\n");
                return;
            }
        };
        if let Some(chosen) = options.cas_in {
            self.choose_cas(key, Some(cas), chosen);
        }
        if let (Some(ttl), false) = (options.ttl, created) {
            let expiry = self.expiry(ttl);
            self.run(key, Command::SetExpiry { expiry }, &mut Vec::new());
        }
        // A created counter already has its final expiry; `t` reads it where the flag stands.
        let start = if created { Expiry::NEVER } else { expiry };
        let ttl_secs = self::ttl_secs(self.expiry_in_flag_order(meta, start, created, true), self.now_secs);
        let mut digits = itoa::Buffer::new();
        let number = digits.format(value).as_bytes();
        // memcached 1.6.40: q silences a counter created on a miss (N) too.
        if options.quiet() {
            return;
        }
        if options.has(b'v') {
            out.extend_from_slice(b"VA ");
            reply::push_u64(out, number.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        let item = MetaItem { cas: self.cas_out(cas), ttl_secs, ..MetaItem::default() };
        reply::meta_flags(out, meta, Some(&item), b"ct");
        out.extend_from_slice(b"\r\n");
        if options.has(b'v') {
            out.extend_from_slice(number);
            out.extend_from_slice(b"\r\n");
        }
    }

    pub(super) fn meta_debug(&mut self, meta: &Meta<'_>, key: Key<'_>, out: &mut Vec<u8>) {
        let (hash, partition) = (key.hash, key.partition);
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        // A side-effect-free look: the reader when there is one, else a plain get.
        let outcome = match self.shared.map.reader(partition) {
            Some(reader) => reader.get(hash, &key, self.now_secs, &mut value),
            None => self.run(key, Command::Get, &mut value),
        };
        self.scratch = value;
        let Outcome::Hit(hit) = outcome else {
            out.extend_from_slice(b"EN\r\n");
            return;
        };
        out.extend_from_slice(b"ME ");
        out.extend_from_slice(meta.key_token);
        out.extend_from_slice(b" exp=");
        reply::push_i64(out, ttl_secs(hit.expiry, self.now_secs));
        out.extend_from_slice(b" la=");
        reply::push_u64(out, self.now_secs.saturating_sub(hit.last_access_secs) as u64);
        out.extend_from_slice(b" cas=");
        reply::push_u64(out, self.cas_out(hit.cas));
        out.extend_from_slice(if hit.fetched_before { b" fetch=yes" } else { b" fetch=no" });
        out.extend_from_slice(b" cls=1 size=");
        reply::push_u64(out, debug_size(key.len(), hit.value_len) as u64);
        out.extend_from_slice(b"\r\n");
    }
}
