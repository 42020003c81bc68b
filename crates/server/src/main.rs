//! The `quicksilver` binary: parse the command line, start the server (in the background with
//! -d, writing -P's pid file, as -u's user), stop on SIGTERM/SIGINT.

use qs_server::config::file;
use qs_server::sys::daemon;

/// What -i prints (memcached prints its and libevent's licenses).
const LICENSE: &str =
    "quicksilver is licensed under the MIT license or the Apache License 2.0, at your option.\n\
It follows memcached's protocols and behaviour; memcached is Copyright (c) 2003, Danga Interactive, Inc.,\n\
under the BSD 3-clause license.";

/// The command line, over --config-file's options; exits with clap's report or status 64 (a
/// config file that cannot be read or has a line that is not an option) when there is none.
fn load_config() -> qs_server::config::Config {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match file::load(&args) {
        Ok(config) => config,
        Err(file::LoadError::Args(error)) => error.exit(),
        Err(file::LoadError::File(message)) => {
            eprintln!("quicksilver: {message}");
            std::process::exit(64);
        }
    }
}

/// A panic anywhere takes the whole process down with a failure status (SIGABRT), after the
/// usual report: a worker that died would leave its partitions' clients unanswered in a process
/// that still looks alive, and an exit 0 would keep a service manager from restarting it (with
/// -e, warm). docs/ARCHITECTURE.md, "Panics".
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

fn main() {
    abort_on_panic();
    let mut config = load_config();
    if config.license {
        println!("{LICENSE}");
        return;
    }
    if let Err(message) = config.validate() {
        eprintln!("quicksilver: {message}");
        std::process::exit(2);
    }
    if config.coredumps && !qs_server::sys::raise_core_limit() {
        eprintln!("failed to ensure corefile creation");
        std::process::exit(71);
    }
    qs_server::sys::fix_mmap_threshold();
    let verbose = config.verbose;
    let fds = qs_server::sys::raise_fd_limit(config.max_connections as u64 + 64);
    if fds < config.max_connections as u64 + 16 && verbose > 0 {
        eprintln!("quicksilver: open-file limit {fds} is below -c {}", config.max_connections);
    }
    // The pid file's path as given, before -d moves to `/`.
    if let Some(path) = config.pidfile.take() {
        config.pidfile = Some(std::path::absolute(&path).unwrap_or(path));
    }
    let background = match config.daemon {
        // Before any thread starts: a fork keeps only the calling thread.
        true => match daemon::daemonize(verbose > 0) {
            Ok(background) => Some(background),
            Err(error) => {
                eprintln!("quicksilver: cannot run in the background: {error}");
                std::process::exit(1);
            }
        },
        false => None,
    };
    let fail = |background: Option<daemon::Background>, message: &str, status: i32| -> ! {
        match background {
            Some(background) => background.failed(message),
            None => eprintln!("quicksilver: {message}"),
        }
        std::process::exit(status);
    };
    let (pidfile, user, config_lock_memory, memory_file) =
        (config.pidfile.clone(), config.user.clone(), config.lock_memory, config.memory_file.clone());
    let server = match qs_server::Server::start_held(config) {
        Ok(server) => server,
        Err(message) => fail(background, &message, 1),
    };
    // Written while still root (memcached too), so it may go where the user cannot write. As
    // in memcached, a pid file that cannot be written is a warning: a service manager that
    // runs the server as its user (Debian's memcached.conf names /var/run/memcached) keeps it
    // in the foreground and needs none.
    let _pidfile = match pidfile.as_deref().map(daemon::PidFile::create) {
        Some(Err(error)) => {
            let path = pidfile.as_deref().unwrap_or(std::path::Path::new("")).display();
            eprintln!("Could not open the pid file {path} for writing: {error}");
            None
        }
        Some(Ok(file)) => Some(file),
        None => None,
    };
    if let Some(user) = user {
        // After the ports are bound and the memory is mapped.
        if let Err(error) = daemon::switch_user(&user) {
            fail(background, &error.message, error.status);
        }
    }
    if config_lock_memory {
        // As memcached: a failure is a warning (the limit on locked memory is often low).
        if let Err(error) = qs_server::sys::lock_memory() {
            eprintln!("warning: -k invalid, mlockall() failed: {error}");
        }
    }
    // Only now, as the user -u names, do the workers take connections.
    server.serve();
    if let Some(background) = background {
        background.started();
    }
    handle_signals(&server, verbose);
    server.wait();
    if let Some(path) = memory_file {
        if let Err(error) = qs_server::sys::memfile::write_meta(&path, qs_server::sys::now_secs()) {
            eprintln!(
                "[restart] cannot write {}: {error}",
                qs_server::sys::memfile::meta_path(&path).display()
            );
        }
    }
}

/// SIGTERM, SIGINT and SIGUSR1 (memcached's graceful stop before a restart with -e; any stop is
/// one here) stop the server; SIGHUP reads cluster discovery's fleet file again (ignored without
/// one, as memcached ignores it outside its proxy mode).
fn handle_signals(server: &qs_server::Server, verbose: u8) {
    let stop = server.stopper();
    let shared = server.shared().clone();
    let mut signals =
        match signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGHUP])
        {
            Ok(signals) => signals,
            Err(error) => {
                eprintln!("quicksilver: cannot handle signals: {error}");
                std::process::exit(1);
            }
        };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if signal == libc::SIGHUP {
                if shared.cluster.enabled() {
                    if let Err(error) = shared.cluster.reload() {
                        eprintln!("quicksilver: SIGHUP: {error}");
                    }
                }
                continue;
            }
            if verbose > 0 {
                eprintln!("quicksilver: signal {signal}, stopping");
            }
            stop();
            break;
        }
    });
}
