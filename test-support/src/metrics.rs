//! Reading samples out of Prometheus text.

/// The value of the sample `name{labels}` in Prometheus text (labels in
/// the order rendered), if present.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let rendered: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let key = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", rendered.join(","))
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&key)?.strip_prefix(' ')?.trim().parse().ok())
}
