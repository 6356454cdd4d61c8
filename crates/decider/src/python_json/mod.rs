//! JSON as the reference's Python reads and writes it: a request body is read as `json.loads`
//! reads it ([`loads`]) into values with Python's number semantics ([`Json`]), and a state or
//! option is written into the prompt as `json.dumps`, `repr` and `str` write it ([`dumps`]).

mod dumps;
mod loads;
mod value;

pub use dumps::{Bounded, Full, dumps, float_repr, py_repr, py_str, py_truthy, py_type_name, write_json};
pub use loads::{LoadError, MAX_DEPTH, MAX_INT_DIGITS, decode, loads, loads_text};
pub use value::{Int, Json, JsonMap};
