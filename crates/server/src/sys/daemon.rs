//! memcached's process options: `-d` (run in the background), `-P` (pid file) and `-u` (the
//! user to run as when started as root), so that a memcached service definition can start
//! quicksilver unchanged. Each `unsafe` block is one libc call on values this module owns.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::FromRawFd;

/// The child of [`daemonize`]: tells the waiting parent how the start went.
pub struct Background {
    report: std::fs::File,
}

impl Background {
    /// The server is serving: the parent exits 0.
    pub fn started(mut self) {
        let _ = self.report.write_all(b"ok");
    }

    /// The server could not start: the parent prints `message` and exits 1.
    pub fn failed(mut self, message: &str) {
        let _ = self.report.write_all(message.as_bytes());
    }
}

/// `-d`: forks into a new session with stdin and stdout on /dev/null (stderr too unless
/// `keep_stderr`) and the working directory `/`, as memcached's `daemonize` does. The parent
/// stays until the child reports (unlike memcached's, which exits at once, so a port already
/// taken shows as a failed start), then exits 0, or 1 with the child's message. Call before
/// any thread starts: only the calling thread survives a fork.
pub fn daemonize(keep_stderr: bool) -> io::Result<Background> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a writable array of the two descriptors pipe(2) fills.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (mut read_end, write_end) =
        unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
    // SAFETY: no other thread runs yet (the caller's contract), so the child is a whole copy.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(read_end);
            // SAFETY: setsid has no arguments; it fails only for a group leader, which a fresh
            // child is not.
            unsafe { libc::setsid() };
            let _ = std::env::set_current_dir("/");
            let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
            let targets: &[i32] = if keep_stderr { &[0, 1] } else { &[0, 1, 2] };
            for &target in targets {
                // SAFETY: both descriptors are open; dup2 replaces `target` atomically.
                if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), target) } < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(Background { report: write_end })
        }
        _ => {
            drop(write_end);
            let mut report = Vec::new();
            let _ = read_end.read_to_end(&mut report);
            if report == b"ok" {
                std::process::exit(0);
            }
            let message = if report.is_empty() {
                "the server stopped before it started".to_string()
            } else {
                String::from_utf8_lossy(&report).into_owned()
            };
            eprintln!("quicksilver: {message}");
            std::process::exit(1);
        }
    }
}

/// Why [`switch_user`] failed, with memcached's message and exit status.
#[derive(Debug)]
pub struct UserError {
    /// What to print.
    pub message: String,
    /// memcached's status: 67 (EX_NOUSER) for an unknown user, 71 (EX_OSERR) otherwise.
    pub status: i32,
}

/// `-u`: when running as root, become `user` (its group, no supplementary groups); otherwise
/// nothing, as in memcached. glibc applies the change to every thread of the process.
pub fn switch_user(user: &str) -> Result<(), UserError> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let not_found = || UserError { message: format!("can't find the user {user} to switch to"), status: 67 };
    let name = CString::new(user).map_err(|_| not_found())?;
    // SAFETY: passwd is plain data; zeroed is a valid value for getpwnam_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the name is NUL-terminated, `entry` and
    // `found` are writable, and `buf` is writable for the length passed.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(not_found());
    }
    let failed = || UserError { message: format!("failed to assume identity of user {user}"), status: 71 };
    // SAFETY: an empty group list (count 0, null pointer) is valid for setgroups.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        return Err(failed());
    }
    // SAFETY: setgid/setuid take plain ids found above; their results are checked.
    if unsafe { libc::setgid(entry.pw_gid) } != 0 || unsafe { libc::setuid(entry.pw_uid) } != 0 {
        return Err(failed());
    }
    Ok(())
}

/// `-P`: the pid file, removed when the server stops.
pub struct PidFile {
    path: std::path::PathBuf,
}

impl PidFile {
    /// Writes this process's id and a newline to `path`.
    pub fn create(path: &std::path::Path) -> io::Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id()))?;
        Ok(PidFile { path: path.to_path_buf() })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
