//! Circles among a crate's rooms: a room is a top-level module of the crate (a file or folder
//! directly under `src/`, with everything below it), and the root file (`lib.rs`, `main.rs`) is a
//! room of its own. The file → file imports of `graph` are grouped by the importing and the
//! imported file's room; rooms that reach each other (Tarjan's strongly connected components) are
//! one knot, reported with the pairs in it that import each other directly and one circle through
//! it, each step with a line that takes it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::graph::{components, file_edges, shortest_circle};
use crate::source::SourceFile;
use crate::Link;

/// Rooms that reach each other through imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomCircle {
    /// Every room of the knot, by name (`http`, `answering`, `lib`).
    pub rooms: Vec<String>,
    /// The pairs of rooms of the knot that import each other directly, each pair and the list sorted.
    pub mutual: Vec<(String, String)>,
    /// One circle through the knot, from its first room by name: each step's room imports the next
    /// step's, and the last step's the first.
    pub links: Vec<RoomLink>,
}

/// One step of a circle among rooms: `from` imports `to`, for instance at `link`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomLink {
    pub from: String,
    pub to: String,
    /// The first import from `from` into `to` (by file path, then line).
    pub link: Link,
}

impl std::fmt::Display for RoomCircle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "  rooms reaching each other: {}", self.rooms.join(", "))?;
        if !self.mutual.is_empty() {
            let pairs: Vec<String> = self.mutual.iter().map(|(a, b)| format!("{a} <-> {b}")).collect();
            writeln!(f, "  rooms importing each other: {}", pairs.join(", "))?;
        }
        writeln!(f, "  one circle:")?;
        for step in &self.links {
            let Link { file, line, imports } = &step.link;
            writeln!(f, "    {} -> {}: {}:{line} imports {}", step.from, step.to, file.display(), imports.display())?;
        }
        Ok(())
    }
}

/// The room of `file`: the first segment of its module, or for the root file its own name.
fn room_of(file: &SourceFile) -> String {
    match file.module.first() {
        Some(top) => top.clone(),
        None => file.path.file_stem().map_or_else(|| "root".to_string(), |s| s.to_string_lossy().into_owned()),
    }
}

/// The knots among the rooms of `files` (one crate's), each starting at its first room by name.
pub fn room_circles(files: &[SourceFile]) -> Vec<RoomCircle> {
    let mut names: Vec<String> = files.iter().map(room_of).collect();
    names.sort();
    names.dedup();
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let room: Vec<usize> = files.iter().map(|f| index[room_of(f).as_str()]).collect();
    // room → imported room → the first import (file path, line, imported file)
    let mut edges: Vec<BTreeMap<usize, (PathBuf, usize, PathBuf)>> = vec![BTreeMap::new(); names.len()];
    for (from, imported) in file_edges(files).into_iter().enumerate() {
        for (to, line) in imported {
            if room[from] == room[to] {
                continue;
            }
            let witness = (files[from].path.clone(), line, files[to].path.clone());
            edges[room[from]]
                .entry(room[to])
                .and_modify(|first| {
                    if (&witness.0, witness.1) < (&first.0, first.1) {
                        *first = witness.clone();
                    }
                })
                .or_insert(witness);
        }
    }
    let mut found: Vec<RoomCircle> = components(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut component| {
            component.sort();
            let mutual = component
                .iter()
                .flat_map(|&a| component.iter().map(move |&b| (a, b)))
                .filter(|&(a, b)| a < b && edges[a].contains_key(&b) && edges[b].contains_key(&a))
                .map(|(a, b)| (names[a].clone(), names[b].clone()))
                .collect();
            let start = component[0];
            let order = shortest_circle(start, &component, &edges);
            let links = order
                .iter()
                .enumerate()
                .map(|(k, &v)| {
                    let to = *order.get(k + 1).unwrap_or(&start);
                    let (file, line, imports) = edges[v][&to].clone();
                    RoomLink { from: names[v].clone(), to: names[to].clone(), link: Link { file, line, imports } }
                })
                .collect();
            RoomCircle { rooms: component.iter().map(|&r| names[r].clone()).collect(), mutual, links }
        })
        .collect();
    found.sort_by(|a, b| a.rooms.cmp(&b.rooms));
    found
}
