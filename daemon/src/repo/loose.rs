//! The state of the loose refs, read with raw `readdir` (names and modification times, no ref
//! parsed): what tells a replica that a ref moved.

use std::hash::{Hash, Hasher};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;

/// A fingerprint of every loose ref below `refs_dir`: each file's path and bytes, read exactly
/// (never trusted by its stat), in any order (the sum of one hash per file, so the directory
/// order does not matter). Lock files (`*.lock`, a ref being written) are left out, as the ref
/// store leaves them out. A stateless clone asks this twice (ls-refs, fetch): gix-ref's loose
/// iterator sorted names, validated them and read each file with about six system calls; here
/// a file costs `openat` relative to its directory, one `read` and `close`.
pub fn loose_refs_state(refs_dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(refs_dir) {
        Ok(dir) => dir,
        // No refs directory: no loose refs (gix-ref's iterator says the same).
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut state = LooseState { sum: 0, files: 0 };
    let mut prefix = b"refs/".to_vec();
    state.directory(dir.into(), &mut prefix, 0)?;
    Ok(state.sum ^ state.files.rotate_left(32))
}

pub(super) struct LooseState {
    pub(super) sum: u64,
    pub(super) files: u64,
}

/// Directories nested deeper than this below `refs/` are an error, not a state that leaves them
/// out (links are never followed, so only a real tree this deep gets here).
pub(super) const MAX_REF_DEPTH: usize = 256;

impl LooseState {
    fn directory(&mut self, dir: std::os::fd::OwnedFd, prefix: &mut Vec<u8>, depth: usize) -> std::io::Result<()> {
        struct Dir(*mut libc::DIR);
        impl Drop for Dir {
            fn drop(&mut self) {
                // SAFETY: opened by fdopendir below, closed once (with its descriptor).
                unsafe { libc::closedir(self.0) };
            }
        }
        if depth > MAX_REF_DEPTH {
            return Err(std::io::Error::other(format!("refs nested deeper than {MAX_REF_DEPTH} directories")));
        }
        let raw = dir.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor; the stream owns it from here.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            let err = std::io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(err);
        }
        let stream = Dir(stream);
        loop {
            // readdir tells an error only through errno.
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid stream; the entry lives until the next readdir on it.
            let entry = unsafe { libc::readdir(stream.0) };
            if entry.is_null() {
                let errno = std::io::Error::last_os_error();
                return match errno.raw_os_error() {
                    Some(0) | None => Ok(()),
                    Some(_) => Err(errno),
                };
            }
            // SAFETY: `d_name` is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." || bytes.ends_with(b".lock") {
                continue;
            }
            // SAFETY: as above.
            let d_type = unsafe { (*entry).d_type };
            let len = prefix.len();
            prefix.extend_from_slice(bytes);
            // SAFETY: the stream is open (closed only when `stream` drops); its descriptor stays its own.
            let at = unsafe { libc::dirfd(stream.0) };
            let result = if d_type == libc::DT_DIR {
                self.subdirectory(at, name, prefix, depth)
            } else {
                self.file(at, name, prefix, depth, d_type == libc::DT_UNKNOWN)
            };
            prefix.truncate(len);
            result?;
        }
    }

    fn subdirectory(
        &mut self,
        at: i32,
        name: &std::ffi::CStr,
        prefix: &mut Vec<u8>,
        depth: usize,
    ) -> std::io::Result<()> {
        // SAFETY: `at` is the open directory being read, `name` an entry of it.
        let fd = unsafe {
            libc::openat(at, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            // Removed while listed: it is not part of this state.
            return if err.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(err) };
        }
        prefix.push(b'/');
        // SAFETY: a descriptor we just opened and own.
        self.directory(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }, prefix, depth + 1)
    }

    /// One loose ref: its path and bytes. A ref file is tens of bytes: a read that returns
    /// less than the buffer reached the end of the regular file. A symbolic link is read
    /// through, as the ref store reads it; one that leads to a directory counts by its name and
    /// is not followed (no loop). `unknown`: the file system gave no type, so this may be a
    /// directory (followed) or a link (not opened: counted by its name).
    fn file(
        &mut self,
        at: i32,
        name: &std::ffi::CStr,
        prefix: &mut Vec<u8>,
        depth: usize,
        unknown: bool,
    ) -> std::io::Result<()> {
        let flags = libc::O_RDONLY | libc::O_CLOEXEC | if unknown { libc::O_NOFOLLOW } else { 0 };
        // SAFETY: `at` is the open directory being read, `name` an entry of it.
        let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOENT) => Ok(()),
                Some(libc::ELOOP) => {
                    self.name_only(prefix);
                    Ok(())
                }
                _ => Err(err),
            };
        }
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        prefix.hash(&mut h);
        let mut buf = [0u8; 512];
        loop {
            use std::os::fd::AsRawFd;
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EISDIR) if unknown => {
                        prefix.push(b'/');
                        return self.directory(fd, prefix, depth + 1);
                    }
                    Some(libc::EISDIR) => {
                        return {
                            self.name_only(prefix);
                            Ok(())
                        };
                    }
                    _ => return Err(err),
                }
            }
            let n = n as usize;
            buf[..n].hash(&mut h);
            if n < buf.len() {
                break;
            }
        }
        self.sum = self.sum.wrapping_add(h.finish());
        self.files += 1;
        Ok(())
    }

    /// An entry that is not read: it counts by its path.
    fn name_only(&mut self, prefix: &[u8]) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (prefix, "not read").hash(&mut h);
        self.sum = self.sum.wrapping_add(h.finish());
        self.files += 1;
    }
}
