//! Project chores as a library, so their tests can call them: `jevbench`, `accuracy`.

pub mod accuracy;
pub mod jevbench;
