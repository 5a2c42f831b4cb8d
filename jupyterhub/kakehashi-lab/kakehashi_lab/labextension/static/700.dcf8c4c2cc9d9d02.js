"use strict";(self.rspackChunkkakehashi_lab=self.rspackChunkkakehashi_lab||[]).push([[700],{646(e,t,r){var o=r(601),n=r.n(o),a=r(314),i=(r.n(a))()(n());i.push([e.id,`/* The "Submit notebook as job" dialog. Lab's own variables keep it in the user's theme. */
/* The dialog fits its content and the window: the fields scroll inside it, while the estimate, a refusal and the
   buttons stay in view. */
.kk-dialog .jp-Dialog-content {
  min-width: 32rem;
  max-width: 44rem;
  max-height: calc(100vh - 2rem);
  display: flex;
  flex-direction: column;
}

.kk-dialog .jp-Dialog-body {
  display: flex;
  flex-direction: column;
  min-height: 0;
  overflow: hidden;
}

.kk-submit {
  display: flex;
  flex-direction: column;
  min-height: 0;
}

.kk-form {
  min-height: 0;
}

.kk-fields {
  display: flex;
  flex-direction: column;
  gap: 0.5rem;
  overflow-y: auto;
  min-height: 0;
  flex: 1 1 auto;
}

.kk-outcome {
  flex: 0 0 auto;
  display: flex;
  flex-direction: column;
  gap: 0.25rem;
}

.kk-file-list {
  display: flex;
  flex-direction: column;
  max-height: 8rem;
  overflow-y: auto;
}

.kk-file {
  font-family: var(--jp-code-font-family);
  font-size: var(--jp-code-font-size);
}

.kk-over {
  color: var(--jp-error-color1);
}

.kk-form,
.kk-followup {
  display: flex;
  flex-direction: column;
  gap: 0.5rem;
}

.kk-field {
  display: grid;
  grid-template-columns: 8rem 1fr;
  align-items: center;
  gap: 0.5rem;
}

.kk-field select,
.kk-field input {
  font: inherit;
  padding: 0.2rem 0.3rem;
  color: var(--jp-ui-font-color1);
  background: var(--jp-input-background);
  border: var(--jp-border-width) solid var(--jp-border-color1);
}

.kk-parameters {
  display: flex;
  flex-direction: column;
  gap: 0.4rem;
  border: var(--jp-border-width) solid var(--jp-border-color2);
  padding: 0.4rem 0.6rem;
}

.kk-notebook,
.kk-hint {
  color: var(--jp-ui-font-color2);
  margin: 0;
}

.kk-estimate {
  min-height: 1.4em;
  margin: 0;
}

.kk-error {
  color: var(--jp-error-color1);
  margin: 0;
}

.kk-error:empty {
  display: none;
}

.kk-followup button {
  align-self: flex-start;
}
`,""]),r.d(t,{},{A:i})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",o=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),o&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),o&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,o,n,a){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(o)for(var l=0;l<this.length;l++){var c=this[l][0];null!=c&&(i[c]=!0)}for(var s=0;s<e.length;s++){var d=[].concat(e[s]);o&&i[d[0]]||(void 0!==a&&(void 0===d[5]||(d[1]="@layer".concat(d[5].length>0?" ".concat(d[5]):""," {").concat(d[1],"}")),d[5]=a),r&&(d[2]&&(d[1]="@media ".concat(d[2]," {").concat(d[1],"}")),d[2]=r),n&&(d[4]?(d[1]="@supports (".concat(d[4],") {").concat(d[1],"}"),d[4]=n):d[4]="".concat(n)),t.push(d))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,o=0;o<t.length;o++)if(t[o].identifier===e){r=o;break}return r}function o(e,o){for(var n={},a=[],i=0;i<e.length;i++){var l=e[i],c=o.base?l[0]+o.base:l[0],s=n[c]||0,d="".concat(c," ").concat(s);n[c]=s+1;var u=r(d),p={css:l[1],media:l[2],sourceMap:l[3],supports:l[4],layer:l[5]};if(-1!==u)t[u].references++,t[u].updater(p);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(p,o);o.byIndex=i,t.splice(i,0,{identifier:d,updater:f,references:1})}a.push(d)}return a}e.exports=function(e,n){var a=o(e=e||[],n=n||{});return function(e){e=e||[];for(var i=0;i<a.length;i++){var l=r(a[i]);t[l].references--}for(var c=o(e,n),s=0;s<a.length;s++){var d=r(a[s]);0===t[d].references&&(t[d].updater(),t.splice(d,1))}a=c}}},659(e){var t={};e.exports=function(e,r){var o=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!o)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");o.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var o,n,a;o="",r.supports&&(o+="@supports (".concat(r.supports,") {")),r.media&&(o+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(o+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),o+=r.css,n&&(o+="}"),r.media&&(o+="}"),r.supports&&(o+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(o+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(o,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},959(e,t,r){var o=r(72),n=r.n(o),a=r(825),i=r.n(a),l=r(659),c=r.n(l),s=r(56),d=r.n(s),u=r(540),p=r.n(u),f=r(113),m=r.n(f),h=r(646),v={};v.styleTagTransform=m(),v.setAttributes=d(),v.insert=c().bind(null,"head"),v.domAPI=i(),v.insertStyleElement=p(),n()(h.A,v),h.A&&h.A.locals&&h.A.locals}}]);