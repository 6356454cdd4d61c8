//! Layout rules for the workspace's own sources: no two files of one crate import each other, directly
//! or around a loop. A cycle between files means neither can be read, tested or moved on its own; the
//! test lists every cycle as a chain of files, with the lines that make each link.
//!
//! The check is std-only and reads the sources as tokens, not as a Rust syntax tree, so it knows:
//! - a file's module from its path (`lib.rs`/`main.rs` = crate root, `foo.rs` and `foo/mod.rs` = `foo`,
//!   `foo/bar.rs` = `foo::bar`);
//! - references: every `use` tree (braces, `self`, `as`, globs) and every path in code that starts with
//!   `crate::`, `$crate::`, `self::`, `super::` or the name of one of the file's child modules;
//! - inline `mod name { .. }` blocks (`mod tests`), whose `super::` is the file's own module;
//! - names a file brings in with `use` (`pub use q8_matmul::Q8_BLOCK` in `lib.rs`): a path through
//!   such a name leads to the file that defines it, not to the file that passes it on;
//! - comments, strings and char literals are skipped.
//!
//! A `pub use` is a re-export: a facade the file shows to others, not something it uses, so it makes
//! no link of its own (a crate root re-exporting `engine::Decider` does not depend on `engine.rs`;
//! whoever writes `crate::Decider` does). `mod foo;` declarations make no link either, but a parent
//! naming its child in code or a private `use` (`use body::JsonBody;` in `serve.rs`) does: a child
//! that reaches back with `super::AppState` then closes a cycle.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// The source folders checked, one per crate (relative to the workspace root).
const CRATES: [&str; 6] =
    ["crates/ops/src", "crates/qwen35/src", "crates/decider/src", "crates/cli/src", "xtask/src", "tests/support"];

/// How many `use` hops a path may take through re-exports before the search stops (a guard against
/// a loop of `use` statements; real chains are one or two hops long).
const MAX_HOPS: usize = 8;

#[test]
fn no_import_cycles_between_source_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf();
    let report: Vec<String> = CRATES.iter().flat_map(|dir| cycle_report(&load_crate(&root, dir))).collect();
    assert!(report.is_empty(), "import cycles between source files:\n{}", report.join("\n"));
}

/// Reads every `.rs` file under `dir` into a crate, its paths written relative to `root` so the
/// report names them as the workspace does.
fn load_crate(root: &Path, dir: &str) -> Crate {
    let mut files = Vec::new();
    collect_rs_files(&root.join(dir), &mut files);
    files.sort();
    let sources = files.iter().map(|path| {
        let relative = path.strip_prefix(root.join(dir)).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        (relative, text)
    });
    Crate::new(dir, sources.collect())
}

/// Walks a folder tree for `.rs` files.
fn collect_rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Tokens

/// One token of a source file: an identifier (`$crate` reads as `crate`), `::`, or one punctuation
/// character. Literals, comments and whitespace are dropped: they never name a module.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// Splits a source file into tokens, skipping comments (line, doc and nested block), string literals
/// (plain, byte, C and raw with any number of `#`), char and byte literals, lifetimes and numbers.
fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let (mut tokens, mut i, mut line) = (Vec::new(), 0, 1);
    while i < chars.len() {
        let start = i;
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            i = skip_while(&chars, i, |c| c != '\n');
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i = skip_block_comment(&chars, i);
        } else if let Some(end) = string_literal_end(&chars, i) {
            i = end;
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if c.is_ascii_digit() {
            i = skip_while(&chars, i, is_ident_char);
        } else if let Some(prefix) = identifier_prefix(&chars, i) {
            i = skip_while(&chars, i + prefix + 1, is_ident_char);
            tokens.push(Token { text: chars[start + prefix..i].iter().collect(), line });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push(Token { text: "::".into(), line });
            i += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(Token { text: c.to_string(), line });
            }
            i += 1;
        }
        line += chars[start..i].iter().filter(|&&c| c == '\n').count();
    }
    tokens
}

/// If an identifier starts at `i`, the length of what comes before its name: 0, or 1 for `$crate`
/// (read as `crate`: a macro's path to its own crate) and 2 for a raw identifier `r#name`.
fn identifier_prefix(chars: &[char], i: usize) -> Option<usize> {
    let name_at = |j: usize| chars.get(j).is_some_and(|&c| is_ident_start(c));
    match chars[i] {
        '$' if name_at(i + 1) => Some(1),
        'r' if chars.get(i + 1) == Some(&'#') && name_at(i + 2) => Some(2),
        c if is_ident_start(c) => Some(0),
        _ => None,
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The index of the first character from `i` on that fails `keep`.
fn skip_while(chars: &[char], mut i: usize, keep: impl Fn(char) -> bool) -> usize {
    while i < chars.len() && keep(chars[i]) {
        i += 1;
    }
    i
}

/// The end of a `/* .. */` comment starting at `i`; Rust block comments nest.
fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('*')) => (depth, i) = (depth + 1, i + 2),
            ('*', Some('/')) => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
        if depth == 0 {
            return i;
        }
    }
    i
}

/// If a string literal starts at `i` (`"`, `b"`, `c"`, `r"`, `r#"`, `br#"`, ..), the index just past
/// it. Raw strings end at `"` followed by as many `#` as they began with and have no escapes.
fn string_literal_end(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && is_ident_char(chars[i - 1]) {
        return None; // `r`/`b` inside a longer identifier
    }
    let mut j = i;
    if matches!(chars[j], 'b' | 'c') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = skip_while(chars, j, |c| c == '#') - j;
    j += hashes;
    if chars.get(j) != Some(&'"') || (hashes > 0 && !raw) {
        return None;
    }
    j += 1;
    while j < chars.len() {
        match chars[j] {
            '\\' if !raw => j += 2,
            '"' if chars[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes => {
                return Some(j + 1 + hashes);
            }
            _ => j += 1,
        }
    }
    Some(j)
}

/// Skips a char literal (`'x'`, `'\n'`, `'{'`, `b'x'` once its `b` is read) or a lifetime/label
/// (`'a`, `'static`) starting at the quote at `i`. A lifetime's name is skipped too, so it never
/// reads as a path.
fn skip_quote(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        return skip_while(chars, i + 3, |c| c != '\'') + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    skip_while(chars, i + 1, is_ident_char)
}

// ---------------------------------------------------------------------------------------------------
// References

/// A module-absolute path (`["serve", "body", "JsonBody"]`; empty = the crate root) or `None` for a
/// path that leaves the crate (`std::..`, `burn::..`).
type Absolute = Option<Vec<String>>;

/// One place a file names something by path, made absolute where it was read.
#[derive(Debug, Clone)]
struct Reference {
    path: Vec<String>,
    line: usize,
}

/// What one file says: its references, and the names its top-level `use` statements bind (so paths
/// through those names can be followed on to the file that defines them).
#[derive(Debug, Default)]
struct FileScan {
    references: Vec<Reference>,
    bindings: HashMap<String, Absolute>,
}

/// The context a path is read in: the file's module, the inline modules around the path, and the
/// file's child modules (a bare `child::x` path names one).
struct Scope<'a> {
    file_module: &'a [String],
    inline: Vec<(String, usize)>,
    children: &'a BTreeSet<String>,
}

impl Scope<'_> {
    /// The module the code at this point is in: the file's module plus the open inline modules.
    fn module(&self) -> Vec<String> {
        let inline = self.inline.iter().map(|(name, _)| name.clone());
        self.file_module.iter().cloned().chain(inline).collect()
    }

    /// Makes a path as written absolute: `crate::` from the root, `self::`/`super::` from the module
    /// at this point, a bare child module's name from the file's module; anything else is external.
    fn absolute(&self, segments: &[String]) -> Absolute {
        let first = segments.first()?.as_str();
        let mut module = self.module();
        let rest = match first {
            "crate" => {
                module.clear();
                &segments[1..]
            }
            "self" | "super" => {
                let supers = segments.iter().skip(1).take_while(|s| *s == "super").count();
                let up = supers + usize::from(first == "super");
                module.truncate(module.len().checked_sub(up)?);
                &segments[1 + supers..]
            }
            name if self.children.contains(name) => {
                module = self.file_module.to_vec();
                segments
            }
            _ => return None,
        };
        Some(module.into_iter().chain(rest.iter().cloned()).collect())
    }
}

/// Reads one file's tokens for references and top-level bindings. `file_module` is the file's own
/// module path and `children` its child modules' names.
fn scan_file(tokens: &[Token], file_module: &[String], children: &BTreeSet<String>) -> FileScan {
    let mut scope = Scope { file_module, inline: Vec::new(), children };
    let (mut scan, mut depth, mut i) = (FileScan::default(), 0usize, 0);
    while i < tokens.len() {
        match tokens[i].text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                scope.inline.retain(|&(_, opened)| opened <= depth);
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t.text == "{") => {
                scope.inline.push((tokens[i + 1].text.clone(), depth + 1));
            }
            "use" => {
                i = scan_use(tokens, i, &scope, depth, &mut scan);
                continue;
            }
            _ if starts_path(tokens, i) => {
                let segments = path_segments(tokens, i);
                let in_visibility = i > 0 && tokens[i - 1].text == "in"; // `pub(in crate::a)`
                if let (Some(path), false) = (scope.absolute(&segments), in_visibility) {
                    scan.references.push(Reference { path, line: tokens[i].line });
                }
                i += 2 * segments.len() - 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

/// Whether token `i` begins a path in code: an identifier followed by `::` and not itself preceded by
/// `::` (then it is a later segment of a path already read).
fn starts_path(tokens: &[Token], i: usize) -> bool {
    let ident = tokens[i].text.starts_with(is_ident_start);
    let next = tokens.get(i + 1).is_some_and(|t| t.text == "::");
    let after_colons = i > 0 && tokens[i - 1].text == "::";
    ident && next && !after_colons
}

/// The identifiers of the path starting at token `i` (`crate::generic::f::<T>` gives `crate`,
/// `generic`, `f`).
fn path_segments(tokens: &[Token], mut i: usize) -> Vec<String> {
    let mut segments = vec![tokens[i].text.clone()];
    while tokens.get(i + 1).is_some_and(|t| t.text == "::")
        && let Some(next) = tokens.get(i + 2).filter(|t| t.text.starts_with(is_ident_start))
    {
        segments.push(next.text.clone());
        i += 2;
    }
    segments
}

/// Reads the `use` statement at token `i` up to its `;` and returns the index after it. Each leaf
/// is a reference unless the statement is a re-export (`pub use`, `pub(crate) use`); leaves of a
/// top-level statement bind their names for later path following.
fn scan_use(tokens: &[Token], i: usize, scope: &Scope, depth: usize, scan: &mut FileScan) -> usize {
    let mut leaves = Vec::new();
    let end = use_tree(tokens, i + 1, Vec::new(), &mut leaves);
    let reexport = is_reexport(tokens, i);
    for (segments, name) in leaves {
        let path = scope.absolute(&segments);
        if let (Some(path), false) = (&path, reexport) {
            scan.references.push(Reference { path: path.clone(), line: tokens[i].line });
        }
        if let (Some(name), 0) = (name, depth) {
            scan.bindings.insert(name, path);
        }
    }
    end + 1
}

/// Whether the `use` at token `i` has a visibility: `pub use` or `pub(..) use`.
fn is_reexport(tokens: &[Token], i: usize) -> bool {
    let mut j = i;
    if j > 0 && tokens[j - 1].text == ")" {
        while j > 0 && tokens[j - 1].text != "(" {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j > 0 && tokens[j - 1].text == "pub"
}

/// The leaves of a use tree: each path as written, and the name it binds (`None` for a glob or `as _`).
type Leaves = Vec<(Vec<String>, Option<String>)>;

/// Reads one use tree from token `i` with the segments before it in `prefix`, pushing its leaves.
/// Returns the index of the token after it.
fn use_tree(tokens: &[Token], mut i: usize, mut prefix: Vec<String>, leaves: &mut Leaves) -> usize {
    while let Some(token) = tokens.get(i) {
        match token.text.as_str() {
            "::" => i += 1,
            "*" => {
                leaves.push((prefix, None));
                return i + 1;
            }
            "{" => return use_group(tokens, i + 1, &prefix, leaves),
            ";" | "," | "}" => break,
            segment => {
                prefix.push(segment.to_string());
                i += 1;
                if tokens.get(i).is_some_and(|t| t.text == "::") {
                    continue;
                }
                return use_leaf(tokens, i, prefix, leaves);
            }
        }
    }
    i
}

/// Reads the trees of a `{ a, b::c, self }` group whose first tree starts at token `i`; returns the
/// index after the closing brace.
fn use_group(tokens: &[Token], mut i: usize, prefix: &[String], leaves: &mut Leaves) -> usize {
    while tokens.get(i).is_some_and(|t| t.text != "}") {
        i = use_tree(tokens, i, prefix.to_vec(), leaves);
        if tokens.get(i).is_some_and(|t| t.text == ",") {
            i += 1;
        }
    }
    i + 1
}

/// Finishes a leaf whose last segment was just read: `a::b::self` is `a::b`, and `as name` renames
/// the binding.
fn use_leaf(tokens: &[Token], mut i: usize, mut path: Vec<String>, leaves: &mut Leaves) -> usize {
    if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let mut name = path.last().cloned().filter(|s| s != "self" && s != "super" && s != "crate");
    if tokens.get(i).is_some_and(|t| t.text == "as") {
        name = tokens.get(i + 1).map(|t| t.text.clone()).filter(|s| s != "_");
        i += 2;
    }
    leaves.push((path, name));
    i
}

// ---------------------------------------------------------------------------------------------------
// Crates

/// One crate's files, the module of each, and what each file references.
struct Crate {
    /// Paths as the report writes them (`crates/qwen35/src/format.rs`).
    paths: Vec<String>,
    /// Each file's crate root (itself for `lib.rs`/`main.rs`).
    roots: Vec<usize>,
    /// Non-root module paths to their file.
    by_module: HashMap<Vec<String>, usize>,
    scans: Vec<FileScan>,
    /// Each file's source lines, for quoting the line that makes a link.
    lines: Vec<Vec<String>>,
}

/// One link of the import graph: `from` references `to`, on these lines of `from`.
type Edges = BTreeMap<(usize, usize), Vec<usize>>;

impl Crate {
    /// Builds a crate from `(path relative to the source folder, text)` pairs; `dir` prefixes the
    /// paths in the report.
    fn new(dir: &str, sources: Vec<(String, String)>) -> Crate {
        let modules: Vec<Vec<String>> = sources.iter().map(|(path, _)| module_of(path)).collect();
        let tokens: Vec<Vec<Token>> = sources.iter().map(|(_, text)| tokenize(text)).collect();
        let by_module =
            modules.iter().enumerate().filter(|(_, m)| !m.is_empty()).map(|(i, m)| (m.clone(), i)).collect();
        let roots = crate_roots(&modules, &tokens);
        let scans = (0..sources.len())
            .map(|f| {
                let children = child_modules(&modules, &roots, f);
                scan_file(&tokens[f], &modules[f], &children)
            })
            .collect();
        let paths = sources.iter().map(|(path, _)| format!("{dir}/{path}")).collect();
        let lines = sources.iter().map(|(_, text)| text.lines().map(|l| l.trim().to_string()).collect()).collect();
        Crate { paths, roots, by_module, scans, lines }
    }

    /// Resolves an absolute path to a file: the longest prefix that is a module file (the crate root
    /// for none), then on through the name that file binds with `use`, if it binds the next segment.
    /// `None` when the path leads out of the crate.
    fn resolve(&self, root: usize, path: &[String], hops: usize) -> Option<usize> {
        let (file, used) =
            (1..=path.len()).rev().find_map(|n| self.by_module.get(&path[..n]).map(|&f| (f, n))).unwrap_or((root, 0));
        let Some(next) = path.get(used) else { return Some(file) };
        match self.scans[file].bindings.get(next) {
            Some(None) => None,
            Some(Some(target)) if hops < MAX_HOPS => {
                let onward: Vec<String> = target.iter().chain(&path[used + 1..]).cloned().collect();
                self.resolve(self.roots[file], &onward, hops + 1)
            }
            _ => Some(file),
        }
    }

    /// The links between different files, with the lines that make each.
    fn edges(&self) -> Edges {
        let mut edges = Edges::new();
        for (from, scan) in self.scans.iter().enumerate() {
            for reference in &scan.references {
                if let Some(to) = self.resolve(self.roots[from], &reference.path, 0)
                    && to != from
                {
                    let lines = edges.entry((from, to)).or_default();
                    if lines.last() != Some(&reference.line) {
                        lines.push(reference.line);
                    }
                }
            }
        }
        edges
    }
}

/// A file's module path from its path in the source folder; `lib.rs` and `main.rs` give the root.
fn module_of(path: &str) -> Vec<String> {
    let mut segments: Vec<String> = path.trim_end_matches(".rs").split('/').map(String::from).collect();
    if segments.last().is_some_and(|s| s == "mod") || (segments.len() == 1 && ["lib", "main"].contains(&&*segments[0]))
    {
        segments.pop();
    }
    segments
}

/// Each file's crate root. A folder with both `lib.rs` and `main.rs` holds two crates: a module
/// belongs to `main.rs` when `main.rs` declares its top-level `mod`, else to `lib.rs`.
fn crate_roots(modules: &[Vec<String>], tokens: &[Vec<Token>]) -> Vec<usize> {
    let roots: Vec<usize> = (0..modules.len()).filter(|&f| modules[f].is_empty()).collect();
    let declares = |root: usize, name: &str| {
        tokens[root].windows(3).any(|w| w[0].text == "mod" && w[1].text == name && w[2].text == ";")
    };
    (0..modules.len())
        .map(|f| match modules[f].first() {
            None => f,
            Some(top) => roots.iter().copied().find(|&r| declares(r, top)).or(roots.first().copied()).unwrap_or(f),
        })
        .collect()
}

/// The names of file `f`'s child modules (for a root, the top-level modules of its own crate).
fn child_modules(modules: &[Vec<String>], roots: &[usize], f: usize) -> BTreeSet<String> {
    let own = &modules[f];
    (0..modules.len())
        .filter(|&c| modules[c].len() == own.len() + 1 && modules[c].starts_with(own) && roots[c] == roots[f])
        .map(|c| modules[c].last().unwrap().clone())
        .collect()
}

// ---------------------------------------------------------------------------------------------------
// Cycles

/// The strongly connected components of more than one file (Tarjan's algorithm), each sorted.
fn cycles(files: usize, edges: &Edges) -> Vec<Vec<usize>> {
    let mut tarjan = Tarjan { next: vec![Vec::new(); files], index: vec![None; files], ..Default::default() };
    for &(from, to) in edges.keys() {
        tarjan.next[from].push(to);
    }
    for f in 0..files {
        if tarjan.index[f].is_none() {
            tarjan.visit(f);
        }
    }
    tarjan.components.into_iter().filter(|c| c.len() > 1).collect()
}

#[derive(Default)]
struct Tarjan {
    next: Vec<Vec<usize>>,
    index: Vec<Option<usize>>,
    low: HashMap<usize, usize>,
    stack: Vec<usize>,
    on_stack: BTreeSet<usize>,
    counter: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low.insert(v, self.counter);
        self.counter += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        for w in self.next[v].clone() {
            if self.index[w].is_none() {
                self.visit(w);
                self.low.insert(v, self.low[&v].min(self.low[&w]));
            } else if self.on_stack.contains(&w) {
                self.low.insert(v, self.low[&v].min(self.index[w].unwrap()));
            }
        }
        if Some(self.low[&v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort();
            self.components.push(component);
        }
    }
}

/// Chains that cover a component: every pair of files that name each other (`[a, b, a]`), then from
/// each file not yet on a chain, the shortest way back to it inside the component. Every file of a
/// component lies on some cycle, so each search finds one.
fn chains(component: &[usize], edges: &Edges) -> Vec<Vec<usize>> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mutual = edges.keys().filter(|&&(a, b)| a < b && inside.contains(&a) && edges.contains_key(&(b, a)));
    let mut chains: Vec<Vec<usize>> = mutual.map(|&(a, b)| vec![a, b, a]).collect();
    let mut covered: BTreeSet<usize> = chains.iter().flatten().copied().collect();
    for &start in component {
        if covered.contains(&start) {
            continue;
        }
        let chain = shortest_cycle(start, &inside, edges);
        covered.extend(chain.iter().copied());
        chains.push(chain);
    }
    chains
}

/// The shortest path from `start` back to `start` through files of `inside` (breadth first).
fn shortest_cycle(start: usize, inside: &BTreeSet<usize>, edges: &Edges) -> Vec<usize> {
    let mut came_from: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &(_, w) in edges.range((v, 0)..=(v, usize::MAX)).map(|(k, _)| k) {
            if w == start {
                let mut chain = vec![v];
                while let Some(&before) = came_from.get(chain.last().unwrap()) {
                    chain.push(before);
                }
                chain.reverse();
                chain.push(start);
                return chain;
            }
            if inside.contains(&w) && !came_from.contains_key(&w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// The report for one crate: each cycle as a chain of files, then the links inside each component
/// with the line of the referencing file that makes them.
fn cycle_report(krate: &Crate) -> Vec<String> {
    let edges = krate.edges();
    let mut report = Vec::new();
    for component in cycles(krate.paths.len(), &edges) {
        for chain in chains(&component, &edges) {
            report.push(chain.iter().map(|&f| krate.paths[f].as_str()).collect::<Vec<_>>().join(" -> "));
        }
        for (&(from, to), lines) in &edges {
            if component.contains(&from) && component.contains(&to) {
                report.push(format!("    {} -> {}", krate.paths[from], krate.paths[to]));
                for &line in lines {
                    report.push(format!("        {}:{line}: {}", krate.paths[from], krate.lines[from][line - 1]));
                }
            }
        }
    }
    report
}

// ---------------------------------------------------------------------------------------------------
// The checker's own tests

#[cfg(test)]
mod checker {
    use super::*;

    /// A crate from `(path, source)` pairs, under a folder named `src`.
    fn krate(files: &[(&str, &str)]) -> Crate {
        Crate::new("src", files.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect())
    }

    /// The links of a crate as `from -> to` path pairs.
    fn links(files: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        let krate = krate(files);
        let edges = krate.edges();
        edges.keys().map(|&(f, t)| (krate.paths[f].clone(), krate.paths[t].clone())).collect()
    }

    fn link(from: &str, to: &str) -> (String, String) {
        (format!("src/{from}"), format!("src/{to}"))
    }

    #[test]
    fn modules_follow_the_file_layout() {
        assert_eq!(module_of("lib.rs"), Vec::<String>::new());
        assert_eq!(module_of("foo.rs"), ["foo"]);
        assert_eq!(module_of("foo/mod.rs"), ["foo"]);
        assert_eq!(module_of("foo/bar.rs"), ["foo", "bar"]);
    }

    #[test]
    fn comments_strings_and_chars_name_nothing() {
        let text: Vec<String> = tokenize("a /* b /* c */ d */ e // f\n'{' \"g\\\"\" r#\"h\"# 'i x::y b'j'")
            .into_iter()
            .map(|t| t.text)
            .collect();
        assert_eq!(text, ["a", "e", "x", "::", "y", "b"]);
        let files = [
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "//! crate::b::X\n/// use crate::b;\nfn f() { let s = \"crate::b::X\"; let t = br#\"crate::b\"#; }",
            ),
            ("b.rs", ""),
        ];
        assert!(links(&files).is_empty());
    }

    #[test]
    fn paths_resolve_to_the_longest_module_file() {
        let files = [
            ("lib.rs", "mod a; mod b; pub struct Root;"),
            ("a.rs", "use crate::{b::{c::C, B}, Root};\nfn f() { crate::b::g(); }"),
            ("b.rs", "pub mod c; fn g() { c::h() }"),
            ("b/c.rs", "pub struct C; fn h() {}"),
        ];
        let expected = [link("a.rs", "b/c.rs"), link("a.rs", "b.rs"), link("a.rs", "lib.rs"), link("b.rs", "b/c.rs")];
        assert_eq!(links(&files), expected.into_iter().collect());
    }

    #[test]
    fn reexports_lead_to_the_defining_file_and_link_nothing_themselves() {
        let files = [
            ("lib.rs", "mod a; mod b; pub use b::B; pub(crate) use a::{self as alias};"),
            ("a.rs", "fn f() -> crate::B { crate::alias::g() }"),
            ("b.rs", "pub struct B; pub use std::vec::Vec;"),
            ("c.rs", "fn f(v: crate::b::Vec<u8>) {}"),
        ];
        assert_eq!(links(&files), [link("a.rs", "b.rs")].into_iter().collect());
    }

    #[test]
    fn super_in_an_inline_module_is_the_file_itself() {
        let files = [
            ("lib.rs", "mod a;"),
            (
                "a.rs",
                "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn g() { super::f(); super::super::h(); }\n}",
            ),
        ];
        assert_eq!(links(&files), [link("a.rs", "lib.rs")].into_iter().collect());
    }

    #[test]
    fn a_child_and_its_parent_naming_each_other_is_a_cycle() {
        let files = [
            ("lib.rs", "mod serve;"),
            ("serve.rs", "mod body;\nstruct State;\nfn f() { body::drain() }"),
            ("serve/body.rs", "use super::State;\npub fn drain() {}"),
        ];
        let report = cycle_report(&krate(&files));
        assert_eq!(report[0], "src/serve.rs -> src/serve/body.rs -> src/serve.rs");
        assert!(report.contains(&"        src/serve/body.rs:1: use super::State;".to_string()));
    }

    #[test]
    fn components_are_covered_by_chains() {
        // 0 -> 1 -> 0, 1 -> 2 -> 1, and 3 -> 0 outside any cycle.
        let edges: Edges = [(0, 1), (1, 0), (1, 2), (2, 1), (3, 0)].into_iter().map(|e| (e, vec![1])).collect();
        assert_eq!(cycles(4, &edges), [vec![0, 1, 2]]);
        assert_eq!(chains(&[0, 1, 2], &edges), [vec![0, 1, 0], vec![1, 2, 1]]);
        assert!(cycles(2, &[((0, 1), vec![1])].into_iter().collect()).is_empty());
        // 0 -> 1 -> 2 -> 0 with a shortcut 0 -> 2: the loop is found the short way round.
        let edges: Edges = [(0, 1), (1, 2), (2, 0), (0, 2)].into_iter().map(|e| (e, vec![1])).collect();
        assert_eq!(chains(&[0, 1, 2], &edges), [vec![0, 2, 0], vec![1, 2, 0, 1]]);
    }
}
