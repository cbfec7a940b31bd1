// The scans are inline in their header, so that Swift can inline them into the JSON reader's and the device
// token's loops.
#include "CPushScan.h"
