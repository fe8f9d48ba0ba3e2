/* test_bytes.h — GPT-2's byte -> character map (the byte-level alphabet of a tokenizer.json), for the
 * tests and fuzz targets that write their own tokenizer.json. */
#ifndef FSDP_TEST_BYTES_H
#define FSDP_TEST_BYTES_H

/* out (at least 3 bytes): the UTF-8 of byte b's character, NUL-terminated. */
static inline void test_gpt2_byte_char(int b, char *out) {
    int n = 0, cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
        cp = 256;
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174)) cp++;
    }
    if (cp < 0x80) {
        out[n++] = (char)cp;
    } else {
        out[n++] = (char)(0xC0 | (cp >> 6));
        out[n++] = (char)(0x80 | (cp & 0x3F));
    }
    out[n] = '\0';
}

#endif
