fn main() {
    for h in [r#"{"a":}"#, r#"{"t":7}"#, r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#, r#"{"__metadata__":{"k":1}}"#, r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}"] {
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend(h.as_bytes()); b.extend([0u8;6]);
        std::fs::write("/tmp/x.st", &b).unwrap();
        println!("{h}\n  -> {}", kiln_formats::SafetensorsFile::open("/tmp/x.st").unwrap_err());
    }
}
