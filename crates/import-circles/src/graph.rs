//! From the files' named paths to file → file imports, and the circles among them (Tarjan's
//! strongly connected components; one circle shown for each).

use std::collections::{BTreeMap, BTreeSet};

use crate::paths::named_paths;
use crate::source::SourceFile;
use crate::{Circle, Link};

/// The circles among `files` (one crate's), each starting at its first file by path.
pub fn circles(files: &[SourceFile]) -> Vec<Circle> {
    let edges = file_edges(files);
    let mut found: Vec<Circle> = components(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|component| circle_through(&component, &edges, files))
        .collect();
    found.sort_by(|a, b| a.links[0].file.cmp(&b.links[0].file));
    found
}

/// File → file imports: for each file (by index), the files it imports, each with the first line
/// naming it.
pub(crate) fn file_edges(files: &[SourceFile]) -> Vec<BTreeMap<usize, usize>> {
    let by_module: BTreeMap<&[String], usize> =
        files.iter().enumerate().map(|(i, f)| (f.module.as_slice(), i)).collect();
    // importer → imported → the first line naming it
    let mut edges: Vec<BTreeMap<usize, usize>> = vec![BTreeMap::new(); files.len()];
    for (from, file) in files.iter().enumerate() {
        for named in named_paths(&file.code, &file.module, &file.children) {
            let Some(to) = deepest_file(&by_module, &named.path) else { continue };
            // A parent's re-export of a descendant's item is its interface, like its `mod`.
            let into_descendant = files[to].module.starts_with(&file.module);
            if to != from && !(named.reexport && into_descendant) {
                edges[from].entry(to).or_insert(named.line);
            }
        }
    }
    edges
}

/// The file of the deepest module `path` names.
fn deepest_file(by_module: &BTreeMap<&[String], usize>, path: &[String]) -> Option<usize> {
    (0..=path.len()).rev().find_map(|n| by_module.get(&path[..n]).copied())
}

/// Tarjan's strongly connected components of the graph `edges` (node → its successors, each with
/// what the edge carries).
pub(crate) fn components<E>(edges: &[BTreeMap<usize, E>]) -> Vec<Vec<usize>> {
    struct State<'e, E> {
        edges: &'e [BTreeMap<usize, E>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit<E>(s: &mut State<E>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].keys() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.found.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.found
}

/// One circle inside a component: from its first file by path, the shortest way back to it.
fn circle_through(component: &[usize], edges: &[BTreeMap<usize, usize>], files: &[SourceFile]) -> Circle {
    let start = *component.iter().min_by_key(|&&i| &files[i].path).expect("a component has a file");
    let order = shortest_circle(start, component, edges);
    let links = order
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let to = *order.get(k + 1).unwrap_or(&start);
            Link { file: files[v].path.clone(), line: edges[v][&to], imports: files[to].path.clone() }
        })
        .collect();
    Circle { links }
}

/// The nodes of the shortest circle from `start` back to it within `component` (a strongly
/// connected component of `edges` holding `start`), `start` first; the last node leads to `start`.
pub(crate) fn shortest_circle<E>(start: usize, component: &[usize], edges: &[BTreeMap<usize, E>]) -> Vec<usize> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    // Breadth first from `start` within the component, until an edge leads back to it.
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut frontier = vec![start];
    let mut last = start;
    'search: while !frontier.is_empty() {
        let mut next = Vec::new();
        for &v in &frontier {
            for &w in edges[v].keys() {
                if w == start {
                    last = v;
                    break 'search;
                }
                if inside.contains(&w) && !came_from.contains_key(&w) && w != start {
                    came_from.insert(w, v);
                    next.push(w);
                }
            }
        }
        frontier = next;
    }
    let mut order = vec![last];
    while let Some(&prev) = came_from.get(order.last().expect("not empty")) {
        order.push(prev);
    }
    order.reverse();
    order
}
