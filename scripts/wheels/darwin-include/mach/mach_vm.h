/*
 * <mach/mach_vm.h> for cross-building the macOS wheels (scripts/wheels/golib.sh adds
 * -I scripts/wheels/darwin-include for darwin targets only).
 *
 * Why: Zig 0.14.1 (PyPI `ziglang`, the C compiler of cgo for the macOS wheels) ships macOS's
 * <mach/...> headers without mach_vm.h, the MIG-generated user header of xnu's
 * osfmk/mach/mach_vm.defs. Prometheus' Go client (github.com/prometheus/client_golang/prometheus,
 * used by engine/internal/metrics) compiles process_collector_mem_cgo_darwin.c, which includes it
 * for one routine, mach_vm_region, so without this file the darwin build stops with
 * "'mach/mach_vm.h' file not found".
 *
 * What: the declaration of that routine only, with the types of the SDK's header (they are in
 * Zig's <mach/mach_types.h>, <mach/vm_region.h> and <mach/machine/vm_types.h>). The symbol
 * _mach_vm_region is exported by /usr/lib/libSystem.B.dylib, which Zig's libSystem.tbd lists, so
 * the link records it against libSystem like every other libc call; on the Mac it resolves to the
 * real routine. A routine this file does not declare fails the compile (implicit declaration is an
 * error in Zig's clang), never the load.
 */
#ifndef DCCFLOW_MACH_VM_H
#define DCCFLOW_MACH_VM_H

#include <mach/kern_return.h>
#include <mach/mach_types.h>
#include <mach/message.h>
#include <mach/vm_region.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Routine mach_vm_region: the region at or after *address of target_task's map, its size and the
 * info of the given flavor (as declared by the SDK header generated from xnu osfmk/mach/mach_vm.defs). */
extern kern_return_t mach_vm_region(
	vm_map_read_t target_task,
	mach_vm_address_t *address,
	mach_vm_size_t *size,
	vm_region_flavor_t flavor,
	vm_region_info_t info,
	mach_msg_type_number_t *infoCnt,
	mach_port_t *object_name);

#ifdef __cplusplus
}
#endif

#endif /* DCCFLOW_MACH_VM_H */
