// The scanner is inline in its header, so that Swift can inline it into the JSON reader's string loop.
#include "CPushScan.h"
