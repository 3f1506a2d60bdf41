//! Finding where broken weights are: the first tensor of a GGUF file holding a NaN or an
//! infinity. The engine calls it once per model, the first time a step's logits are not
//! finite, so its log names the tensor (and so the layer) to blame.

use kiln_formats::GgufFile;
use kiln_kernels::KernelTable;

use crate::weights::weight_type;

/// The name of the first tensor, in file order, with a non-finite value, if any of the
/// tensors Kiln can read has one. Reads every weight once (dequantized row by row).
pub fn first_non_finite_tensor(file: &GgufFile, kt: &KernelTable) -> Option<String> {
    let mut row = Vec::new();
    file.tensor_infos().iter().find_map(|info| {
        let ty = weight_type(info.dtype)?;
        let t = file.tensor(&info.name).ok()?;
        let cols = usize::try_from(*t.shape.first()?).ok()?;
        let row_bytes = ty.row_bytes(cols)?;
        row.resize(cols, 0.0);
        let dequantize = kt.weight(ty).dequantize_row;
        let bad = t.data.chunks_exact(row_bytes).any(|bytes| {
            dequantize(bytes, &mut row);
            row.iter().any(|v| !v.is_finite())
        });
        bad.then(|| info.name.clone())
    })
}
