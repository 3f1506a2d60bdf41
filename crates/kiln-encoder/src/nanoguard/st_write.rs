//! Writing a safetensors file byte for byte as the reference `safetensors` package does.
//!
//! Its layout: tensors ordered by dtype (widest first in its `Dtype` order, so F32 before
//! BF16 before F16) then by name; a compact JSON header of
//! `{"name":{"dtype":..,"shape":[..],"data_offsets":[begin,end]},..}` in that order,
//! padded with spaces to a multiple of 8 bytes, after its little-endian u64 length; then
//! the tensors' bytes back to back.

use kiln_formats::StDtype;

use super::checkpoint::RawTensor;

/// Position of a dtype in the reference implementation's `Dtype` ordering (for the
/// dtypes a checkpoint can hold here).
fn dtype_order(d: StDtype) -> u8 {
    match d {
        StDtype::F16 => 0,
        StDtype::BF16 => 1,
        _ => 2,
    }
}

/// The file's bytes.
pub(crate) fn serialize(tensors: &[RawTensor]) -> Result<Vec<u8>, String> {
    let mut order: Vec<&RawTensor> = tensors.iter().collect();
    order.sort_by(|a, b| {
        dtype_order(b.dtype)
            .cmp(&dtype_order(a.dtype))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut header = String::from("{");
    let mut offset = 0usize;
    for (i, t) in order.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let name = serde_json::to_string(&t.name).map_err(|e| e.to_string())?;
        let shape: Vec<String> = t.shape.iter().map(usize::to_string).collect();
        let end = offset + t.data.len();
        header.push_str(&format!(
            "{name}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
            t.dtype.name(),
            shape.join(",")
        ));
        offset = end;
    }
    header.push('}');
    let pad = (8 - header.len() % 8) % 8;
    header.extend(std::iter::repeat_n(' ', pad));
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for t in order {
        out.extend_from_slice(&t.data);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips_through_the_reader() {
        let tensors = vec![
            RawTensor {
                name: "b".into(),
                dtype: StDtype::BF16,
                shape: vec![2],
                data: vec![1, 2, 3, 4],
            },
            RawTensor {
                name: "z".into(),
                dtype: StDtype::F32,
                shape: vec![1, 1],
                data: 1.5f32.to_le_bytes().to_vec(),
            },
            RawTensor {
                name: "a".into(),
                dtype: StDtype::F32,
                shape: vec![],
                data: 2.0f32.to_le_bytes().to_vec(),
            },
        ];
        let bytes = serialize(&tensors).expect("serializes");
        let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        assert_eq!(header_len % 8, 0);
        let header = std::str::from_utf8(&bytes[8..8 + header_len]).expect("utf-8");
        assert!(header.starts_with(
            r#"{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]},"b":"#
        ));
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.safetensors");
        std::fs::write(&path, &bytes).expect("write");
        let file = kiln_formats::SafetensorsFile::open(&path).expect("reads back");
        assert_eq!(file.tensor_names().collect::<Vec<_>>(), ["a", "z", "b"]);
        let b = file.tensor("b").expect("b");
        assert_eq!(
            (b.dtype, b.shape, b.data),
            (StDtype::BF16, &[2u64][..], &[1u8, 2, 3, 4][..])
        );
    }
}
