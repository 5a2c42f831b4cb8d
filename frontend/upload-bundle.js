// The direct-upload libraries the Data page uses, bundled by `make vendor` (frontend/vendor.sh) into
// static/vendor/uppy/uppy-s3.min.js: Uppy's core and its S3 multipart plugin, and hash-wasm's streaming SHA-256.
import Uppy from "@uppy/core";
import AwsS3 from "@uppy/aws-s3";
import { createSHA256 } from "hash-wasm";

window.KakehashiUpload = { Uppy, AwsS3, createSHA256 };
