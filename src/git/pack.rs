//! Writes the objects of one commit into one pack file instead of one loose file each. A loose object
//! costs a temporary file, a link, an unlink and often a directory on the workspace's filesystem; for
//! a commit of 100 small files those inode operations were most of the commit's time (`perf`: 75% of
//! it in the kernel). The objects collect in libgit2's in-memory backend (mempack) of a repository
//! handle used only for writing, and go to disk as one pack and its index before anything refers to
//! them (the index file, the commit, HEAD).
//!
//! Every commit adds a pack, and libgit2 searches every pack on each lookup that misses, so small
//! packs are merged into one once there are more than `MAX_SMALL_PACKS` of them.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::path::{Path, PathBuf};

use git2::{Buf, Mempack, ObjectType, Odb, OdbLookupFlags, Oid, Repository};

/// Objects up to this size are collected in memory; larger ones are written loose (streamed, as before).
pub const MAX_BATCHED_OBJECT_BYTES: u64 = 256 * 1024;
/// Collected objects are written out as a pack once they reach this much, so memory stays bounded
/// whatever the number of changed files.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Above mempack's priority nothing is written loose while the batch is attached (libgit2's own
/// backends use 1 and 2).
const MEMPACK_PRIORITY: i32 = 1000;
/// A pack up to this size counts as small: it is one of boxd's batches (or as small as one).
const SMALL_PACK_BYTES: u64 = 4 * 1024 * 1024;
/// Small packs allowed before they are merged.
const MAX_SMALL_PACKS: usize = 16;

/// Objects written through `blob` and `write_tree` land in memory until `flush`.
pub struct Batch<'a, 'odb> {
    repo: &'a Repository,
    odb: &'a Odb<'odb>,
    mempack: &'a Mempack<'odb>,
    /// The object database of a handle without mempack: what is on disk.
    disk: &'a Odb<'odb>,
    held_bytes: Cell<usize>,
    /// Blobs written since the last flush (some may have been on disk already: packed again, harmless).
    held: RefCell<Vec<Oid>>,
}

/// Runs `work` with a batch on `writer`, a repository handle that is used for nothing else: once
/// mempack is attached to its object database, every object written through it stays in memory
/// until flushed. Whatever `work` leaves unflushed is dropped. `disk` is another handle on the same
/// repository.
pub fn with_batch<T, E: From<git2::Error>>(
    writer: &Repository,
    disk: &Repository,
    work: impl FnOnce(&Batch<'_, '_>) -> Result<T, E>,
) -> Result<T, E> {
    let odb = writer.odb()?;
    let disk = disk.odb()?;
    let mempack = odb.add_new_mempack_backend(MEMPACK_PRIORITY)?;
    let batch = Batch {
        repo: writer,
        odb: &odb,
        mempack: &mempack,
        disk: &disk,
        held_bytes: Cell::new(0),
        held: RefCell::new(Vec::new()),
    };
    work(&batch)
}

impl Batch<'_, '_> {
    /// Counts an object written into the batch by other means (libgit2 staging a path itself) in
    /// what the next flush writes to disk.
    pub fn hold(&self, id: Oid) {
        self.held.borrow_mut().push(id);
    }

    pub fn blob(&self, content: &[u8]) -> Result<Oid, git2::Error> {
        if self.held_bytes.get().saturating_add(content.len()) > MAX_BATCH_BYTES {
            self.flush(None)?;
        }
        let id = self.repo.blob(content)?;
        self.held_bytes
            .set(self.held_bytes.get().saturating_add(content.len()));
        self.held.borrow_mut().push(id);
        Ok(id)
    }

    /// Writes what is held as one pack (and its index) into the object database, with the trees of
    /// `tree` that are not on disk yet, then merges small packs if there are too many.
    pub fn flush(&self, tree: Option<Oid>) -> Result<(), git2::Error> {
        let mut builder = self.repo.packbuilder()?;
        builder.set_threads(1);
        for id in self.held.borrow_mut().drain(..) {
            builder.insert_object(id, None)?;
        }
        if let Some(tree) = tree {
            self.insert_new_trees(&mut builder, tree)?;
        }
        if builder.object_count() != 0 {
            let mut pack = Buf::new();
            builder.write_buf(&mut pack)?;
            drop(builder);
            write_pack(self.odb, &pack)?;
        }
        self.mempack.reset()?;
        self.held_bytes.set(0);
        merge_small_packs(self.repo, self.odb)
    }

    /// `tree` and the subtrees under it that exist only in memory: the ones `write_tree` just made.
    /// A subtree already on disk is unchanged, and so is everything under it.
    fn insert_new_trees(
        &self,
        builder: &mut git2::PackBuilder<'_>,
        tree: Oid,
    ) -> Result<(), git2::Error> {
        let mut pending = vec![tree];
        // Bounded by the number of trees written, each visited once.
        while let Some(id) = pending.pop() {
            if self.on_disk(id) {
                continue;
            }
            builder.insert_object(id, None)?;
            let tree = self.repo.find_tree(id)?;
            pending.extend(
                tree.iter()
                    .filter(|entry| entry.kind() == Some(ObjectType::Tree))
                    .map(|entry| entry.id()),
            );
        }
        Ok(())
    }

    /// Whether the object is stored outside the batch, asked of the handle without mempack. Without a
    /// refresh: a pack another process wrote meanwhile makes this false, and the object is packed again.
    fn on_disk(&self, id: Oid) -> bool {
        self.disk.exists_ext(id, OdbLookupFlags::NO_REFRESH)
    }
}

fn write_pack(odb: &Odb<'_>, pack: &[u8]) -> Result<(), git2::Error> {
    let mut writer = odb.packwriter()?;
    writer
        .write_all(pack)
        .map_err(|err| git2::Error::from_str(&format!("writing a pack: {err}")))?;
    writer.commit()?;
    Ok(())
}

/// The packs of `objects/pack` up to `SMALL_PACK_BYTES` that are plain packs: an index, and none of the
/// files that give a pack a role of its own (kept, a partial clone's promisor, cruft, bitmapped).
fn small_packs(pack_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(pack_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "pack")
                && std::fs::symlink_metadata(path)
                    .is_ok_and(|meta| meta.is_file() && meta.len() <= SMALL_PACK_BYTES)
                && path.with_extension("idx").is_file()
                && ["keep", "promisor", "mtimes", "bitmap"]
                    .iter()
                    .all(|ext| !path.with_extension(ext).exists())
        })
        .collect()
}

/// The object ids a version 2 pack index lists (`None` for any other format).
fn index_ids(idx: &[u8]) -> Option<Vec<Oid>> {
    const HEADER: usize = 8;
    const FANOUT: usize = 256 * 4;
    if idx.get(..HEADER)? != b"\xfftOc\0\0\0\x02" {
        return None;
    }
    let last = idx.get(HEADER + FANOUT - 4..HEADER + FANOUT)?;
    let count = u32::from_be_bytes(last.try_into().ok()?) as usize;
    let ids = idx.get(HEADER + FANOUT..HEADER + FANOUT + count.checked_mul(20)?)?;
    ids.chunks_exact(20)
        .map(|id| Oid::from_bytes(id).ok())
        .collect()
}

/// Replaces the small packs with one holding all their objects once there are more than
/// `MAX_SMALL_PACKS`, as `git gc --auto` does for git's own commits. The merged pack is written
/// before any old one is removed, so every object stays readable throughout; a pack that cannot be
/// read is left alone.
fn merge_small_packs(repo: &Repository, odb: &Odb<'_>) -> Result<(), git2::Error> {
    let pack_dir = repo.path().join("objects/pack");
    // A multi-pack index names its packs: removing one would break it for git.
    if pack_dir.join("multi-pack-index").exists() {
        return Ok(());
    }
    let packs = small_packs(&pack_dir);
    if packs.len() <= MAX_SMALL_PACKS {
        return Ok(());
    }
    let mut builder = repo.packbuilder()?;
    let mut merged = Vec::new();
    for pack in packs {
        let Some(ids) = std::fs::read(pack.with_extension("idx"))
            .ok()
            .and_then(|idx| index_ids(&idx))
        else {
            continue;
        };
        for id in ids {
            builder.insert_object(id, None)?;
        }
        merged.push(pack);
    }
    if merged.len() < 2 {
        return Ok(());
    }
    let mut buf = Buf::new();
    builder.write_buf(&mut buf)?;
    drop(builder);
    write_pack(odb, &buf)?;
    for pack in merged {
        for ext in ["pack", "idx", "rev"] {
            let path = pack.with_extension(ext);
            match std::fs::remove_file(&path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(path = %path.display(), "cannot remove a merged pack: {err}");
                }
                _ => {}
            }
        }
    }
    odb.refresh()
}
