//! Project chores as a library, so their tests can call them: `jevbench`.

pub mod jevbench;
