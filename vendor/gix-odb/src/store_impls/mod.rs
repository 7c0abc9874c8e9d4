pub mod dynamic;
pub mod loose;
