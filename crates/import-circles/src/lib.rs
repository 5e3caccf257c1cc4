//! Import circles between the files of a Rust crate: file A names something of file B (`crate::`,
//! `super::`, `self::` or a child module's name) and B, directly or through other files, names
//! something of A. A circle means neither file can be read, changed or tested without the other;
//! the workspace test (`tests/workspace.rs`) keeps every crate free of them.
//!
//! The same imports grouped by room (a top-level file or folder of `src/`, the root file a room of
//! its own) give circles among rooms (`room_circles_in_crate`): folder A names something of folder
//! B and B, directly or through other rooms, something of A, though no two files need name each
//! other. The workspace test keeps every crate free of those too, so its rooms stack in floors.
//!
//! What counts: paths in code outside `#[cfg(test)]` (tests may reach anywhere), comments left out.
//! A path resolves to the deepest module file it names (`crate::a::b::Item` → `a/b.rs` if it exists,
//! else `a.rs` or `a/mod.rs`); `mod x;` declarations and a parent's `pub use` of its descendants'
//! items (its interface) are not imports.
#![forbid(unsafe_code)]

mod graph;
mod paths;
mod rooms;
mod source;

use std::path::{Path, PathBuf};

pub use graph::circles;
pub use rooms::{room_circles, RoomCircle, RoomLink};

/// One circle: the files in import order (the last imports the first), each with the line that
/// imports the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub links: Vec<Link>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub file: PathBuf,
    /// The line of `file` that names the next file of the circle.
    pub line: usize,
    pub imports: PathBuf,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for link in &self.links {
            writeln!(f, "  {}:{} imports {}", link.file.display(), link.line, link.imports.display())?;
        }
        Ok(())
    }
}

/// The circles among the files of the crate whose root file (`lib.rs` or `main.rs`) is `root`.
pub fn circles_in_crate(root: &Path) -> std::io::Result<Vec<Circle>> {
    let files = source::crate_files(root)?;
    Ok(circles(&files))
}

/// The circles among the rooms (top-level files and folders) of the crate whose root file is `root`.
pub fn room_circles_in_crate(root: &Path) -> std::io::Result<Vec<RoomCircle>> {
    let files = source::crate_files(root)?;
    Ok(room_circles(&files))
}
