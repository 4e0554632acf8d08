// Policies in the wrong order: a quantizer where the sparsifier goes.
#include <gradcomp/gradcomp.hpp>

gradcomp::compressor<gradcomp::partition::whole, gradcomp::quantize::bf16, gradcomp::sparsify::dense,
                     gradcomp::feedback::none>
    c;
