/* The MPI engine in a build without MPI (CMake found none, or -DVRAM_MPI=OFF): it says so. */
#include "dist/comm_impl.h"

bool vr_comm_mpi_built(void) { return false; }

vr_status vr_comm_mpi(vr_comm **out)
{
    if (out)
        *out = NULL;
    return vr_error(VR_ERR_UNSUPPORTED,
                    "dist: this vram was built without MPI (apt-get install libopenmpi-dev, then rebuild)");
}
