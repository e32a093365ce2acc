/*
 * bcryptprimitives.dll for Wine 8.0 (Debian 12), test use only.
 *
 * Go >= 1.22 programs on Windows load bcryptprimitives.dll from System32 at start-up and call its
 * ProcessPrng (Windows 10 and later have it). Wine gained that DLL in 9.x; under Debian 12's
 * Wine 8.0 every Go program stops with "fatal error: bcryptprimitives.dll not found".
 * scripts/test_windows.sh builds this file with mingw-w64 and copies it into the Wine prefix's
 * System32, never next to dccflow.dll: a real Windows has its own.
 *
 * ProcessPrng fills data with len cryptographically random bytes and always returns TRUE (as
 * documented); here RtlGenRandom (advapi32's SystemFunction036) does the work, at most
 * 0x7fffffff bytes a call.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
	while (len > 0) {
		ULONG n = len > 0x7fffffff ? 0x7fffffff : (ULONG)len;
		if (!SystemFunction036(data, n)) {
			return FALSE;
		}
		data += n;
		len -= n;
	}
	return TRUE;
}
