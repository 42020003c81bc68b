//! The `quicksilver` binary: parse the command line, start the server, stop on SIGTERM/SIGINT.

use clap::Parser;
use qs_server::config::Config;

fn main() {
    let config = Config::parse();
    if let Err(message) = config.validate() {
        eprintln!("quicksilver: {message}");
        std::process::exit(2);
    }
    let verbose = config.verbose;
    let fds = qs_server::sys::raise_fd_limit(config.max_connections as u64 + 64);
    if fds < config.max_connections as u64 + 16 && verbose > 0 {
        eprintln!("quicksilver: open-file limit {fds} is below -c {}", config.max_connections);
    }
    let server = match qs_server::Server::start(config) {
        Ok(server) => server,
        Err(message) => {
            eprintln!("quicksilver: {message}");
            std::process::exit(1);
        }
    };
    let stop = server.stopper();
    let mut signals = match signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT]) {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("quicksilver: cannot handle signals: {error}");
            std::process::exit(1);
        }
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            if verbose > 0 {
                eprintln!("quicksilver: signal {signal}, stopping");
            }
            stop();
        }
    });
    server.wait();
}
