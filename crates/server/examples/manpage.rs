//! Writes quicksilver(1), the man page, from the command line's own definition (clap_mangen),
//! so it cannot drift from `--help`. The package build runs it (scripts/package.sh):
//!
//! ```text
//! cargo run -p qs-server --example manpage > quicksilver.1
//! ```

use clap::CommandFactory;
use qs_server::config::Config;

fn main() -> std::io::Result<()> {
    let command = Config::command().about("a memcached-compatible cache server").long_about(
        "A memcached-compatible cache server on MICA's data path: partitioned per-core data, \
         circular logs and lossy set-associative indexes. It speaks memcached's text, meta and \
         binary protocols and UDP, takes memcached's options, and reads Debian's \
         /etc/memcached.conf format with --config-file. The Debian package runs it as the \
         systemd unit quicksilver.service from /etc/quicksilver.conf.",
    );
    let man = clap_mangen::Man::new(command).date("2026-11-27");
    let mut out = std::io::stdout().lock();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    std::io::Write::write_all(&mut out, EXTRA.as_bytes())?;
    man.render_version_section(&mut out)?;
    Ok(())
}

/// Sections clap has no words for: the files, the signals, and where to read on.
const EXTRA: &str = r#".SH FILES
.TP
\fI/etc/quicksilver.conf\fR
Options for the service, one per line in the format of Debian's /etc/memcached.conf.
An existing /etc/memcached.conf works unchanged.
.TP
\fI/lib/systemd/system/quicksilver.service\fR
The systemd unit: \fBsystemctl edit quicksilver\fR sets \fBEnvironment=OPTIONS=...\fR for
options that win over the file's.
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR, \fBSIGUSR1\fR
Stop gracefully: stop accepting, finish the requests in hand, and with \fB\-e\fR leave the
memory file ready for a warm restart. The unit stops the service with SIGUSR1, memcached's
graceful-stop signal.
.SH EXIT STATUS
0 after a graceful stop; 1 when the server cannot start (a taken port, an unreadable
certificate); 2 for an invalid option; 64 for an unreadable config file or a bad line in it;
67 and 71 when \fB\-u\fR's user cannot be found or assumed (memcached's statuses).
.SH SEE ALSO
\fBmemcached\fR(1). The operator's guide, /usr/share/doc/quicksilver/OPERATIONS.md; what
differs from memcached, /usr/share/doc/quicksilver/COMPATIBILITY.md.
"#;
