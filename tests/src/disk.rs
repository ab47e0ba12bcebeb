//! `SmallDisk`: a tmpfs of a chosen size mounted for a test (a full disk
//! on demand) and unmounted when dropped. Mounting needs root, as the
//! test command runs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted for the test and unmounted when dropped.
pub struct SmallDisk {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `3m`).
    pub fn mount(size: &str) -> SmallDisk {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = parent.path().join("disk");
        std::fs::create_dir(&dir).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount a {size} tmpfs at {} (the test needs root)",
            dir.display()
        );
        SmallDisk {
            dir,
            _parent: parent,
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes zeros to a file `name` on the disk until the disk is full
    /// (panics on any other error); returns the file's path.
    pub fn fill(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        let mut file = std::fs::File::create(&path).expect("create the ballast");
        let full = loop {
            if let Err(e) = std::io::Write::write_all(&mut file, &[0; 65536]) {
                break e;
            }
        };
        assert_eq!(
            full.raw_os_error(),
            Some(libc::ENOSPC),
            "fill {}: {full}",
            path.display()
        );
        path
    }

    /// Grows (or shrinks) the tmpfs to `size`, keeping what it holds.
    pub fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "resize the tmpfs at {} to {size}",
            self.dir.display()
        );
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        match Command::new("umount").arg(&self.dir).status() {
            Ok(status) if status.success() => {}
            other => eprintln!("umount {}: {other:?}", self.dir.display()),
        }
    }
}
