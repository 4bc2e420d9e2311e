//! Run outputs: summary.json (the contract), report.html, JUnit XML.

pub mod html;
pub mod summary;

pub use summary::Summary;
