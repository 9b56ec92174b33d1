pub mod body;
pub mod error;
pub mod params;
pub mod prom;
pub mod protocol;
pub use error::ApiError;
